"""The checks of `recall doctor` (what each checks: `recall.cli.doctor`), one function each,
returning one `Check`; `crds` and `store` are in `crd_check` and `store_check`.

Each reads through `recall.kube.install.InstallReader` (or the results store) and decides from
what it read; none writes anything to the API server (the store's probes: `store_check`).
Liveness is judged as the operator judges it (DESIGN §3): a Lease counts as renewed when its
renewTime is seen to change on the doctor's own monotonic clock (`renewed`), never by comparing
timestamps with this machine's clock. Only `check_engines` compares a recorded time with this
clock, to leave out failures older than an hour.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recall.base.clock import SYSTEM, Clock

if TYPE_CHECKING:
    from recall.kube.install import InstallReader

OK, FAIL, SKIP = "ok", "FAIL", "skip"
# The reasons a job records when its engine or model, not its source, failed it.
ENGINE_REASONS = {
    "ModelNotFound": "engine.whisper.model names a model the workers cannot find",
    "ModelUnavailable": "the model's store did not answer the workers",
    "ModelInvalid": "the model's files are not a faster-whisper model",
    "ModelCorrupt": "the model's files do not match its SHA256SUMS: upload the model again",
    "ModelAccessDenied": "give the workers' store identity read access to the model",
    "ModelCacheUnwritable": "make worker.modelCache writable by the workers' UID (10001): "
    "keep worker.modelCache.hostPathInit.enabled for a hostPath cache, or use the emptyDir",
    "DeviceFailed": "the workers' device failed to load the model (out of memory, a CUDA "
    "error): a smaller model or compute type, fewer worker.slots, or free the GPU",
    "EngineUnauthorized": "engine.openai.apiKeySecret must hold a key the API accepts",
    "EngineRejected": "the OpenAI-compatible API refuses the requests: check engine.openai.*",
}
ENGINE_WINDOW = dt.timedelta(hours=1)
# What a namespace's users need: submit, cancel and read work, and read transcripts (the
# chart's notes read them in the operator's pod).
USER_NEEDS = (
    ("create", "recall.dev", "batches", ""),
    ("delete", "recall.dev", "batches", ""),
    ("list", "recall.dev", "batches", ""),
    ("create", "recall.dev", "transcriptionjobs", ""),
    ("delete", "recall.dev", "transcriptionjobs", ""),
    ("list", "recall.dev", "transcriptionjobs", ""),
    ("create", "", "pods", "exec"),
)


@dataclass(frozen=True)
class Check:
    """One line of the report: the check's name, its outcome, what was found, how to fix it."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.name:<9} {self.detail}"
        return f"{text} — fix: {self.fix}" if self.status == FAIL and self.fix else text


def ok(name: str, detail: str) -> Check:
    return Check(name, OK, detail)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, FAIL, detail, fix)


@dataclass(frozen=True)
class Install:
    """Where the chart put things: the release namespace and the chart's name prefix."""

    namespace: str
    fullname: str

    @property
    def operator(self) -> str:
        return f"{self.fullname}-operator"

    @property
    def worker(self) -> str:
        return f"{self.fullname}-worker"

    @property
    def apf(self) -> str:
        """The prefix of the chart's (cluster-scoped) API Priority and Fairness objects."""
        return f"{self.namespace}-{self.fullname}"


def fullname(release: str, override: str | None = None) -> str:
    """The chart's `recall.fullname`: the override, else the release name when it contains
    the chart's name, else `<release>-recall`; cut as the chart cuts it (`trunc 52 |
    trimSuffix "-"`)."""
    name = override or (release if "recall" in release else f"{release}-recall")
    return name[:52].removesuffix("-")


def renewed(
    read: Callable[[], dict[str, str]],
    seconds: float,
    *,
    clock: Clock = SYSTEM,
    every: float = 0.5,
) -> set[str]:
    """Read `{name: renewTime}` until every name first read was seen to change, or `seconds`
    passed on `clock`; return the names seen renewed."""
    first = read()
    moved: set[str] = set()
    deadline = clock.monotonic() + seconds
    while first and moved != set(first) and clock.monotonic() < deadline:
        clock.sleep(every)
        moved |= {n for n, at in read().items() if n in first and at != first[n]}
    return moved


def renew_times(leases: Iterable[dict[str, Any]]) -> dict[str, str]:
    specs = {lease["metadata"]["name"]: lease.get("spec") or {} for lease in leases}
    return {name: str(s.get("renewTime") or s.get("acquireTime")) for name, s in specs.items()}


def ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def env_of(deployment: dict[str, Any] | None) -> dict[str, str]:
    """The plain `value` variables of a Deployment's first container."""
    if deployment is None:
        return {}
    containers = deployment["spec"]["template"]["spec"].get("containers") or [{}]
    return {e["name"]: e["value"] for e in containers[0].get("env") or [] if "value" in e}


def selector_of(deployment: dict[str, Any]) -> str:
    labels = (deployment["spec"].get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


def field_paths(schema: dict[str, Any], defs: dict[str, Any], path: str = "") -> Iterator[str]:
    """Every property path of a JSON schema (pydantic's, or a CRD's OpenAPI v3 schema), as the
    crds check and `recall_dev.crds` compare them."""
    if "$ref" in schema:
        yield from field_paths(defs[schema["$ref"].split("/")[-1]], defs, path)
        return
    for option in schema.get("anyOf", []):
        yield from field_paths(option, defs, path)
    for name, sub in (schema.get("properties") or {}).items():
        yield f"{path}.{name}"
        yield from field_paths(sub, defs, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from field_paths(schema["items"], defs, f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from field_paths(schema["additionalProperties"], defs, f"{path}{{}}")


def check_operator(reader: InstallReader, install: Install, wait: float) -> Check:
    ns, name = install.namespace, install.operator
    deployment = reader.deployment(ns, name)
    if deployment is None:
        fix = "install the chart here, or pass the --release and --namespace that run it"
        return fail("operator", f"no Deployment {name} in {ns}", fix)
    selector = selector_of(deployment)
    pods = reader.pods(ns, selector)
    live = sorted(p["metadata"]["name"] for p in pods if ready(p))
    logs = f"kubectl -n {ns} logs -l {selector}"
    if not live:
        fix = f"kubectl -n {ns} describe pods -l {selector}: its /readyz says why"
        return fail("operator", f"none of the {len(pods)} pods of {name} is ready", fix)
    env = env_of(deployment)
    if not _flag(env.get("RECALL_OPERATOR_LEADER_ELECTION")):
        if len(live) > 1:
            fix = "set operator.leaderElection.enabled=true"
            return fail("operator", f"{len(live)} ready replicas without leader election", fix)
        return ok("operator", f"{live[0]} is ready and leads (one replica, no election)")
    lease_name = env.get("RECALL_OPERATOR_LEADER_ELECTION_NAME", "recall-operator")
    lease_ns = (
        env.get("RECALL_OPERATOR_LEADER_ELECTION_NAMESPACE")
        or env.get("RECALL_OPERATOR_NAMESPACE")
        or ns
    )
    where = f"{lease_ns}/{lease_name}"
    lease = reader.lease(lease_ns, lease_name)
    if lease is None:
        return fail("operator", f"no leader Lease {where}: no replica has led", logs)
    spec = lease.get("spec") or {}
    seconds = min(wait, float(spec.get("leaseDurationSeconds") or 15))
    moved = renewed(
        lambda: renew_times(filter(None, [reader.lease(lease_ns, lease_name)])), seconds
    )
    holder = str(spec.get("holderIdentity") or "")
    if lease_name not in moved:
        detail = (
            f"the leader Lease {where} ({holder or 'no holder'}) was not renewed in {seconds:.0f} s"
        )
        return fail("operator", f"{detail}: no operator leads", logs)
    pod = holder.rsplit("_", 1)[0]  # a replica's identity is its pod's name and a suffix
    if pod not in live:
        fix = f"kubectl -n {ns} get pods -l {selector}"
        return fail("operator", f"the leader {holder} is not a ready pod of {name}", fix)
    return ok("operator", f"{pod} leads (Lease {where} renewing); {len(live)} of {len(pods)} ready")


def check_workers(reader: InstallReader, install: Install, wait: float) -> Check:
    """Registrations seen renewing, for the chart's engine, whose engine and model loaded
    (`recall.dev/engine-state`); a worker still loading, or too old to say, passes."""
    from recall.protocol import workers
    from recall.protocol.workers import FAILED, LOADED

    ns, name = install.namespace, install.worker
    deployment = reader.deployment(ns, name)
    engine = env_of(deployment).get("RECALL_WORKER_ENGINE", "whisper") if deployment else ""
    look = f"kubectl -n {ns} logs -l {selector_of(deployment)}" if deployment else "the logs"
    leases = {x["metadata"]["name"]: x for x in reader.leases(ns, workers.SELECTOR)}
    if not leases:
        if deployment is not None and deployment["spec"].get("replicas") == 0:
            return ok("workers", f"{name} is scaled to 0: no worker to check")
        return fail("workers", f"no worker has registered in {ns}", look)
    durations = [
        float((x.get("spec") or {}).get("leaseDurationSeconds") or 15) for x in leases.values()
    ]
    # A worker renews every third of its registration's duration.
    moved = renewed(
        lambda: renew_times(reader.leases(ns, workers.SELECTOR)), min(wait, max(durations) / 3 + 2)
    )
    alive = [workers.read(leases[n]) for n in sorted(moved)]
    if not alive:
        detail = f"none of the {len(leases)} worker registrations in {ns} is being renewed"
        return fail("workers", detail, look)
    engines = Counter(r.engine for r in alive)
    counts = ", ".join(f"{n} {e}" for e, n in sorted(engines.items()))
    if engine and engine not in engines:
        fix = f"kubectl -n {ns} rollout status deploy/{name}"
        return fail("workers", f"the live workers run {counts}: none runs {engine}", fix)
    failed = [
        (r, r.engine_state) for r in alive if r.engine_state and r.engine_state.state == FAILED
    ]
    if failed:
        first, state = failed[0]
        detail = (
            f"{len(failed)} of {len(alive)} live workers could not load their engine and model; "
            f"{first.worker} ({first.engine}): {state.error}"
        )
        fix = ENGINE_REASONS.get(state.reason) or f"kubectl -n {ns} logs {first.worker}"
        return fail("workers", detail, fix)
    line = f"{len(alive)} live of {len(leases)} registered ({counts})"
    models = sorted(
        {_short(r.engine_state.model) for r in alive if r.engine_state and r.engine_state.model}
    )
    if models:
        line += f", loaded {', '.join(models)}"
    waiting = [r for r in alive if r.engine_state is None or r.engine_state.state != LOADED]
    if waiting:
        line += f"; {len(waiting)} not loaded yet (still loading, or of an older release)"
    return ok("workers", line)


def _short(model: str) -> str:
    """`<model>@sha256:<64 hex>` with the digest cut to 12 hex digits, as images are shown."""
    name, at, digest = model.rpartition("@")
    return f"{name}@{digest[:19]}" if at and digest.startswith("sha256:") else model


def check_engines(reader: InstallReader, install: Install, now: dt.datetime) -> Check:
    from recall.resources import TranscriptionJob

    failed = []
    for raw in reader.jobs(install.namespace, "status.phase!=Succeeded"):
        error = TranscriptionJob.model_validate(raw).status.last_error
        if error is None or error.reason not in ENGINE_REASONS:
            continue
        if error.time is not None and now - error.time > ENGINE_WINDOW:
            continue
        failed.append((error.time or now, raw["metadata"]["name"], error))
    if not failed:
        return ok("engines", "no job failed on its engine or model in the last hour")
    _, job, error = max(failed, key=lambda f: f[0])
    detail = f"{len(failed)} jobs failed on their engine or model in the last hour; the latest"
    return fail(
        "engines", f"{detail}, {job}: {error.reason}: {error.message}", ENGINE_REASONS[error.reason]
    )


def check_apf(reader: InstallReader, install: Install) -> Check:
    names = [f"{install.apf}-leases", f"{install.apf}-work"]
    upgrade = "helm upgrade the release with apf.enabled=true (the default)"
    for name in names:
        if reader.priority_level(name) is None:
            return fail("apf", f"no PriorityLevelConfiguration {name}", upgrade)
        schema = reader.flow_schema(name)
        if schema is None:
            return fail("apf", f"no FlowSchema {name}", upgrade)
        target = ((schema.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name")
        conditions = (schema.get("status") or {}).get("conditions") or []
        dangling = any(
            c.get("type") == "Dangling" and c.get("status") == "True" for c in conditions
        )
        if target != name or dangling:
            detail = f"FlowSchema {name} points at {target!r}, not at its priority level {name}"
            return fail("apf", detail + (" (dangling)" if dangling else ""), upgrade)
    return ok("apf", f"FlowSchemas and priority levels {' and '.join(names)} in place")


def check_access(reader: InstallReader, install: Install) -> Check:
    ns = install.namespace
    denied = [
        f"{verb} {resource}" + (f"/{sub}" if sub else "")
        for verb, group, resource, sub in USER_NEEDS
        if not reader.may(ns, verb, group, resource, sub)[0]
    ]
    user = reader.whoami() or "you"
    if denied:
        fix = f"kubectl create rolebinding recall-users -n {ns} --clusterrole=edit --user={user}"
        return fail("access", f"{user} may not {', '.join(denied)} in {ns}", fix)
    return ok("access", f"{user} may submit, cancel and read work in {ns}, and read transcripts")
