"""The operator process: kopf's handlers, the runner, discovery and readiness.

`handlers` builds every part of the operator and hands each its peers; `runner` is
`recall operator`; `discovery` holds kopf back until the API server serves the resources;
`readiness` answers `/readyz`.
"""
