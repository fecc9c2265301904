"""The results of accepted jobs: publish them, collect the store's garbage, expire finished Batches.

`publish` copies an accepted result to the user's output prefix and records it; `collect`
deletes what no accepted result references; `retention` deletes a finished Batch's jobs after
its TTL, as Kubernetes Jobs do.
"""
