"""The fenced write: decide on the version read, write at that version, settle what is unclear.

The only way lease state is written, by the worker (claim, renew, complete, fail, release) and
the operator (reclaim, exhaust, cancel, offers) alike: `fenced_write` reads the job at
resourceVersion R, asks a pure transition of `recall.protocol.lease` for the new status,
writes it at R (a PATCH for the writes that keep or end a lease, `LEASE_WRITES`; a PUT of the
status for the rest) and re-reads on 409 (see `write` for the contract). May import
`recall.protocol`, `recall.kube`, `recall.resources` and `recall.base`; never a component.
"""

from recall.fencing.write import LEASE_WRITES, Transition, Unsettled, WriteResult, fenced_write

__all__ = ["LEASE_WRITES", "Transition", "Unsettled", "WriteResult", "fenced_write"]
