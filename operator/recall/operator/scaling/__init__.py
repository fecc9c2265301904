"""Scaling the worker pools: how many workers, and which idle ones go.

`workload` counts a pool's outstanding work, `decide` (pure) turns it into a number of workers
and the idle ones to stop, `scaler` reads, decides and applies on the worker Deployment,
`keda` serves the outstanding work to KEDA's metrics-api trigger, and `service` runs them.
"""
