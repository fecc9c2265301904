"""Reconciliation: a Batch's items, the jobs they become, the plan, the projection, the apply.

`cache` keeps a compact `record` of every job and `marks` the items they changed; `items` and
`fanout` say what a Batch asks for, `resolved` keeps its items per generation; `plan` (pure)
decides what a Batch and its jobs need, `project` (pure) derives the Batch status from its jobs
(`conditions` from their counts); `apply`, the only writer of these decisions, performs a plan
(the Batch status through `status`) and fills a `report`; `gauges` export the statuses' counts.
"""
