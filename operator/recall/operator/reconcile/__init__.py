"""Reconciliation: a Batch's items, the jobs they become, the plan, the projection, the apply.

`cache` keeps a compact `record` of every job and `marks` the items they changed; `items` and
`fanout` say what a Batch asks for, `resolved` keeps each Batch's items per generation; `plan`
(pure) decides what a Batch and its jobs need now, `project` (pure) derives the Batch status
from its jobs (its `conditions` from their counts), and `apply` performs a plan, the only
writer of these decisions: the jobs' writes itself, the Batch status through `status`; its
`report` says what it did, and `gauges` export the Batch statuses' counts.
"""
