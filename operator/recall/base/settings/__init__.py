"""Validated settings of the worker and the operator, from `RECALL_*` environment variables.

Command-line options override the environment; these objects check the relations between
fields (the heartbeat well inside the lease). Modules: `shared` (the API server and the object
store), `worker`, `operator`; import each class from here.
"""

from recall.base.settings.operator import OperatorSettings, PoolScaling
from recall.base.settings.shared import SCHEMES, ApiSettings, StoreSettings
from recall.base.settings.worker import WorkerSettings, default_model_cache_dir

__all__ = [
    "SCHEMES",
    "ApiSettings",
    "OperatorSettings",
    "PoolScaling",
    "StoreSettings",
    "WorkerSettings",
    "default_model_cache_dir",
]
