"""The operator serves its resources only once the API server's discovery lists them.

kopf resolves its resources from discovery once, at start (again only when a CRD changes, and
never with scanning off). An API server still starting may answer discovery before it serves
the CRDs' paths; a kopf that asked then serves no Batch for the rest of its life while it
looks healthy. Two guards:

- `wait_served`, before kopf starts: wait until discovery lists every resource the operator
  needs; after `discovery_seconds` the operator exits with the reason (CRDs not installed).
- `check_insights`, once kopf has resolved: if a needed resource is missing after all (the API
  server restarted in between), stop the operator with the reason, for its Deployment to start
  it again: a restart is the one way to make kopf resolve again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from kopf._cogs.structs.references import Insights  # what kopf resolved; kopf.run takes it

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.kube.base import ApiError
from recall.resources import GROUP, VERSION

_log = log.get("operator")

POLL_SECONDS = 1.0
LOG_EVERY_SECONDS = 10.0


class NotServed(Exception):
    """The API server does not serve a resource the operator needs."""


class Discovery(Protocol):
    def served_plurals(self) -> frozenset[str]: ...


def missing_message(missing: Collection[str], why: str) -> str:
    names = ", ".join(sorted(missing))
    return (
        f"the API server does not serve {GROUP}/{VERSION} {names} ({why}): are the CRDs "
        f"installed? (helm install installs them; or kubectl apply -f the chart's crds/)"
    )


def wait_served(
    discovery: Discovery,
    needed: Collection[str],
    timeout: float,
    *,
    clock: Clock = SYSTEM,
) -> None:
    """Return once discovery lists every plural in `needed`; raise `NotServed` after `timeout`."""
    start = clock.monotonic()
    logged = start - LOG_EVERY_SECONDS
    while True:
        why = "not listed"
        try:
            missing = set(needed) - discovery.served_plurals()
        except ApiError as e:
            missing, why = set(needed), e.message
        if not missing:
            return
        now = clock.monotonic()
        if now - start >= timeout:
            raise NotServed(missing_message(missing, f"{why}, waited {timeout:.0f} s"))
        if now - logged >= LOG_EVERY_SECONDS:
            _log.warning("waiting_for_resources", missing=sorted(missing), reason=why)
            logged = now
        clock.sleep(POLL_SECONDS)


async def check_insights(
    insights: Insights, needed: Collection[str], stop: Callable[[str], None]
) -> None:
    """Once kopf has resolved its resources, `stop` the operator if one of `needed` is missing."""
    await insights.ready_resources.wait()
    watched = {
        r.plural for r in insights.watched_resources if (r.group, r.version) == (GROUP, VERSION)
    }
    missing = set(needed) - watched
    if missing:
        reason = missing_message(missing, "not served when the operator resolved its resources")
        _log.error("resources_unresolved", missing=sorted(missing), reason=reason)
        stop(reason)
