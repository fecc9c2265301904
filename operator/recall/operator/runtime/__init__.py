"""The operator process: kopf's handlers, the runner, discovery and readiness.

`wiring` builds the controller's parts and hands each its peers; `handlers` runs them under
kopf; `runner` is `recall operator`; `discovery` holds kopf back until the API server serves
the resources; `readiness` answers `/readyz`.
"""
