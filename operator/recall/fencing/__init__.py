"""The fenced write: decide on the version read, write at that version, settle what is unclear.

The only way lease state is written, by the worker and the operator alike (contract: `write`).
May import `recall.protocol`, `recall.kube`, `recall.resources` and `recall.base`; never a
component.
"""

from recall.fencing.write import LEASE_WRITES, Transition, Unsettled, WriteResult, fenced_write

__all__ = ["LEASE_WRITES", "Transition", "Unsettled", "WriteResult", "fenced_write"]
