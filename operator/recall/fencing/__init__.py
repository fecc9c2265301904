"""The fenced write: decide on the version read, write at that version, settle what is unclear.

The only way lease state is written, by the worker (claim, renew, complete, fail, release) and
the operator (reclaim, exhaust, cancel, offers) alike: `fenced_write` reads the job at
resourceVersion R, asks a pure transition of `recall.protocol.lease` for the new status,
PATCHes it at R and re-reads on 409 (see `write` for the contract). May import
`recall.protocol`, `recall.kube`, `recall.resources` and `recall.base`; never a component.
"""

from recall.fencing.write import Transition, Unsettled, WriteResult, fenced_write

__all__ = ["Transition", "Unsettled", "WriteResult", "fenced_write"]
