"""The API server fences every writer of a TranscriptionJob, careful or careless.

A careful writer reads the job, checks it, and sends its merge patch with
`metadata.resourceVersion`; a careless one sends the same kind of patch without it. The CRD's
CEL transition rules must refuse, by themselves, every write that breaks the lease protocol
(DESIGN §3): a write to a leased job that does not present the lease token in `status.fence`,
a Succeeded not reached from Leased with that lease's token and attempt, a changed result, any
way out of a final phase, a lease replaced in place, counters that move the wrong way.

Everything here is a raw JSON merge patch of `/status` against the real API server — the
Python lease code is deliberately not used, so these tests pin the schema itself. The
careless writer is the cluster-admin of the test control plane: CEL rules bind everyone. Each
allowed flow runs with and without the resourceVersion guard; each careless write is sent
without it and must be answered 422 with the message of the rule it breaks, leaving the
object exactly as it was.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.helpers import Kube, job_manifest

pytestmark = pytest.mark.integration

GROUP = "recall.dev"
VERSION = "v1alpha1"
PLURAL = "transcriptionjobs"
MERGE_PATCH = "application/merge-patch+json"
CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "transcriptionjobs.recall.dev.yaml"

Status = dict[str, Any]
Patch = dict[str, Any]
Step = Callable[[Status], Patch]

# A distinctive part of each rule's message: a refusal must name the rule it enforces.
HOLDER_ONLY = "only the lease holder writes a leased job: set status.fence"
FINAL = "is final: its status never changes again"
IN_PLACE = "a lease is never replaced in place"
RESULT_IMMUTABLE = "status.result is immutable once accepted"
SUCCEEDED_FROM_LEASED = "becomes Succeeded only from Leased"
LEASE_IFF_LEASED = "status.lease exists exactly while status.phase is Leased"
RELEASES_BY_ONE = "status.releases grows only by one, with a release"
EXPIRED_BY_ONE = "status.expiredLeases grows only by one, with the reclaim"
ATTEMPTS_NEVER_DECREASE = "status.attempts never decreases"
ATTEMPTS_NOT_REMOVED = "status.attempts cannot be removed"
ONE_ATTEMPT_PER_CLAIM = "status.attempts changes only with a claim"
OFFER_ONLY_QUEUED = "status.offer is allowed only while the job is Queued"
RESULT_NAMES_LEASE = "complete records the lease it ends"
NO_CLAIM_IN_BACKOFF = "a job in retry backoff cannot be claimed"
BACKOFF_SET_BY_FAIL = "status.backoffSeconds is set only by the write that ends a lease"
EXHAUST_ONLY_WHEN_SPENT = "a Queued job becomes Failed only when its attempts are spent"
BUDGET = "status.attempts cannot exceed spec.maxAttempts plus the attempts given back"
FENCE_NAMES_LEASE = "status.fence names its lease"
# The whole message: it says what the rule checks (the key's end, not its attempt part).
RESULT_OWN_KEY = (
    "status.result.transcript must be the transcript the completing lease wrote: "
    "its key must end with -<result.token>/transcript.json"
)
PUBLISHED_ONLY = "status.published exists only on a Succeeded job"
PUBLISH_ONLY_WRITE = "the publish record is the only write a Succeeded job takes"


# -- the API -------------------------------------------------------------------------------


def read(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = kube.custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return obj


def write(
    kube: Kube, namespace: str, name: str, status: Patch, resource_version: str | None = None
) -> dict[str, Any]:
    """One raw merge patch of `/status`; guarded by `resource_version` when it is given."""
    body: dict[str, Any] = {"status": status}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    out: dict[str, Any] = kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE_PATCH
    )
    return out


def create(kube: Kube, namespace: str, name: str, **spec: Any) -> None:
    manifest = job_manifest(name)
    manifest["spec"].update(spec)
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)


def step(kube: Kube, namespace: str, name: str, action: Step, *, guarded: bool) -> Status:
    """Read the job, build the action's patch from what was read, write it; the new status."""
    obj = read(kube, namespace, name)
    rv = obj["metadata"]["resourceVersion"] if guarded else None
    out = write(kube, namespace, name, action(obj["status"]), rv)
    status: Status = out["status"]
    return status


def refusal(kube: Kube, namespace: str, name: str, status: Patch) -> str:
    """Send `status` without a resourceVersion; assert 422 and an untouched object. The message
    of the refusal (decoded: the API server's JSON writes `<` as `\\u003c`)."""
    before = read(kube, namespace, name)
    with pytest.raises(ApiException) as e:
        write(kube, namespace, name, status)
    assert e.value.status == 422, e.value.body
    assert read(kube, namespace, name) == before
    message: str = json.loads(e.value.body)["message"]
    return message


# -- what careful writers send -------------------------------------------------------------


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def token(worker: str, attempt: int) -> str:
    """A lease token (32 hex digits) that a test can name again: one per worker and attempt."""
    return hashlib.sha256(f"{worker}/{attempt}".encode()).hexdigest()[:32]


def next_fence(status: Status) -> str:
    """The holder's next fence: its lease token and the next value of its counter."""
    lease_token = status["lease"]["token"]
    _, _, suffix = status.get("fence", "").partition("/")
    counter = int(suffix) + 1 if suffix.isdigit() else 1
    return f"{lease_token}/{counter}"


def claim(worker: str, *, duration: int = 30) -> Step:
    def patch(status: Status) -> Patch:
        attempt = status.get("attempts", 0) + 1
        t, stamp = token(worker, attempt), now()
        return {
            "phase": "Leased",
            "lease": {
                "holder": worker,
                "token": t,
                "acquireTime": stamp,
                "renewTime": stamp,
                "durationSeconds": duration,
            },
            "attempts": attempt,
            "fence": f"{t}/1",
            "offer": None,
            "backoffSeconds": None,
            "startedAt": status.get("startedAt", stamp),
        }

    return patch


def renew(status: Status) -> Patch:
    done = status.get("progress", {}).get("chunksDone", 0) + 1
    return {
        "lease": {"renewTime": now()},
        "progress": {"chunksDone": done, "chunksTotal": 3, "summary": f"{done}/3"},
        "fence": next_fence(status),
    }


def transcript_of(attempt: int, lease_token: str) -> str:
    return f"scratch/ns/j/uid/a{attempt}-{lease_token}/transcript.json"


def publish(status: Status) -> Patch:
    """The operator's one record on a Succeeded job: its outputs and index entry written."""
    return {"published": {"time": now(), "formats": ["srt"], "index": "index/ns/b/u/j.json"}}


def complete(status: Status) -> Patch:
    return {
        "phase": "Succeeded",
        "lease": None,
        "result": {
            "transcript": transcript_of(status["attempts"], status["lease"]["token"]),
            "token": status["lease"]["token"],
            "attempt": status["attempts"],
            "worker": status["lease"]["holder"],
            "words": 3,
        },
        "fence": next_fence(status),
        "completedAt": now(),
    }


def error(status: Status, reason: str, permanent: bool) -> dict[str, Any]:
    return {
        "reason": reason,
        "message": "the engine failed",
        "permanent": permanent,
        "attempt": status["attempts"],
        "time": now(),
    }


def failed(status: Status, reason: str, permanent: bool) -> Patch:
    """What every fail writes: the lease given up, the failure counted, its error."""
    return {
        "lease": None,
        "failures": status.get("failures", 0) + 1,
        "lastError": error(status, reason, permanent),
        "fence": next_fence(status),
    }


def fail_retry(status: Status) -> Patch:
    return {"phase": "Queued", **failed(status, "EngineUnavailable", False), "backoffSeconds": 5}


def fail_final(status: Status) -> Patch:
    return {"phase": "Failed", **failed(status, "SourceNotFound", True), "completedAt": now()}


def release(status: Status) -> Patch:
    return {
        "phase": "Queued",
        "lease": None,
        "releases": status.get("releases", 0) + 1,
        "fence": next_fence(status),
    }


def reclaim(status: Status, *, spent: bool = False) -> Patch:
    """The operator's reclaim of an expired lease: it presents the token it observed."""
    return {
        "phase": "Failed" if spent else "Queued",
        "lease": None,
        "expiredLeases": status.get("expiredLeases", 0) + 1,
        "lastError": error(status, "LeaseExpired", False),
        "fence": f"{status['lease']['token']}/reclaim-{status['attempts']}",
        **({"completedAt": now()} if spent else {}),
    }


def reclaim_spent(status: Status) -> Patch:
    return reclaim(status, spent=True)


def cancel(status: Status) -> Patch:
    patch: Patch = {"phase": "Cancelled", "lease": None, "offer": None, "backoffSeconds": None}
    if "lease" in status:
        patch["fence"] = f"{status['lease']['token']}/cancel-{status['attempts']}"
    patch["completedAt"] = now()
    return patch


def offer(worker: str) -> Step:
    return lambda status: {"offer": {"worker": worker}}


def clear_offer(status: Status) -> Patch:
    return {"offer": None}


def clear_backoff(status: Status) -> Patch:
    return {"backoffSeconds": None}


def exhaust(status: Status) -> Patch:
    return {"phase": "Failed", "offer": None, "backoffSeconds": None, "completedAt": now()}


# -- allowed flows -------------------------------------------------------------------------


@dataclass(frozen=True)
class Flow:
    steps: list[Step]
    expect: Status  # fields of the final status (None: absent)
    spec: dict[str, Any] = field(default_factory=dict)


FLOWS: dict[str, Flow] = {
    "claim, renew twice, complete": Flow(
        [claim("a"), renew, renew, complete],
        {"phase": "Succeeded", "lease": None, "attempts": 1, "fence": f"{token('a', 1)}/4"},
    ),
    "claim, complete, then the one publish record": Flow(
        [claim("a"), complete, publish],
        {"phase": "Succeeded", "attempts": 1},
    ),
    "fail with retry, backoff cleared, claim again": Flow(
        [claim("a"), fail_retry, clear_backoff, claim("b"), complete],
        {"phase": "Succeeded", "attempts": 2, "failures": 1, "backoffSeconds": None},
    ),
    "fail with retry keeps the backoff on the Queued job": Flow(
        [claim("a"), fail_retry],
        {"phase": "Queued", "lease": None, "failures": 1, "backoffSeconds": 5},
    ),
    "fail for good": Flow([claim("a"), renew, fail_final], {"phase": "Failed", "failures": 1}),
    "release gives the job back": Flow(
        [claim("a"), release, claim("b")],
        {"phase": "Leased", "attempts": 2, "releases": 1, "fence": f"{token('b', 2)}/1"},
    ),
    "reclaim to Queued, then a new claim": Flow(
        [claim("a"), renew, reclaim, claim("b"), renew],
        {"phase": "Leased", "expiredLeases": 1, "attempts": 2, "fence": f"{token('b', 2)}/2"},
    ),
    "reclaim to Failed when the attempts are spent": Flow(
        [claim("a"), reclaim_spent],
        {"phase": "Failed", "expiredLeases": 1, "attempts": 1},
        spec={"maxAttempts": 1},
    ),
    "cancel a Queued job": Flow([cancel], {"phase": "Cancelled"}),
    "cancel a Leased job": Flow(
        [claim("a"), renew, cancel],
        {"phase": "Cancelled", "lease": None, "fence": f"{token('a', 1)}/cancel-1"},
    ),
    "offer set and cleared": Flow(
        [offer("w1"), clear_offer, offer("w2")], {"phase": "Queued", "offer": {"worker": "w2"}}
    ),
    "a claim removes the offer": Flow(
        [offer("a"), claim("a")], {"phase": "Leased", "offer": None, "attempts": 1}
    ),
    "exhaust after a failed retry used the last attempt": Flow(
        [claim("a"), fail_retry, exhaust],
        {"phase": "Failed", "backoffSeconds": None, "attempts": 1},
        spec={"maxAttempts": 1},
    ),
    "releases beyond spec.maxReleases count as attempts": Flow(
        [claim("a"), release, claim("b"), release, exhaust],
        {"phase": "Failed", "attempts": 2, "releases": 2},
        spec={"maxAttempts": 1, "maxReleases": 1},
    ),
    "releases up to spec.maxReleases give their attempt back": Flow(
        [claim("a"), release, claim("b"), release, claim("c"), complete],
        {"phase": "Succeeded", "attempts": 3, "releases": 2},
        spec={"maxAttempts": 1, "maxReleases": 2},
    ),
}


@pytest.mark.parametrize("guarded", [True, False], ids=["with-resourceVersion", "without"])
@pytest.mark.parametrize("flow", FLOWS.values(), ids=FLOWS.keys())
def test_protocol_flow__is_accepted(kube: Kube, namespace: str, flow: Flow, guarded: bool) -> None:
    create(kube, namespace, "j", **flow.spec)
    status: Status = {}
    for action in flow.steps:
        status = step(kube, namespace, "j", action, guarded=guarded)
    for key, value in flow.expect.items():
        assert status.get(key) == value, (key, status)


def test_complete__result_records_the_lease_token_and_attempt(kube: Kube, namespace: str) -> None:
    create(kube, namespace, "j")
    for action in (claim("a"), release, claim("b"), renew, complete):
        status = step(kube, namespace, "j", action, guarded=False)
    assert status["result"]["token"] == token("b", 2)
    assert status["result"]["attempt"] == 2


def test_stale_write_with_resource_version__still_gets_409(kube: Kube, namespace: str) -> None:
    """The fence adds to the resourceVersion guard; it does not replace it."""
    create(kube, namespace, "j")
    step(kube, namespace, "j", claim("a"), guarded=True)
    seen = read(kube, namespace, "j")
    step(kube, namespace, "j", renew, guarded=True)
    with pytest.raises(ApiException) as e:
        write(kube, namespace, "j", renew(seen["status"]), seen["metadata"]["resourceVersion"])
    assert e.value.status == 409


# -- careless writes -----------------------------------------------------------------------


@dataclass(frozen=True)
class Careless:
    setup: list[Step]  # careful writes that bring the job to the state under attack
    patch: Step  # the careless write, sent without a resourceVersion
    rule: str  # what the refusal must say
    spec: dict[str, Any] = field(default_factory=dict)


LEASED_BY_A = [claim("a")]


def fake_complete(status: Status) -> Patch:
    return {
        "phase": "Succeeded",
        "lease": None,
        "result": {
            "transcript": transcript_of(1, token("z", 1)),
            "token": token("z", 1),
            "attempt": 1,
        },
    }


def steal_in_place(status: Status) -> Patch:
    stolen = token("z", 2)
    stamp = now()
    lease = {"holder": "z", "token": stolen, "acquireTime": stamp, "renewTime": stamp}
    return {"lease": lease, "attempts": 2, "fence": f"{stolen}/1"}


def with_holder_fence(patch: Patch) -> Step:
    """A write by the holder itself, with a correct new fence: only the rule under test is hit."""
    return lambda status: {**patch, "fence": next_fence(status)}


def with_stale_fence(worker: str, attempt: int, patch: Patch) -> Step:
    return lambda status: {**patch, "fence": f"{token(worker, attempt)}/9"}


def claim_with(**changes: Any) -> Step:
    def patch(status: Status) -> Patch:
        out = claim("z")(status)
        out.update(changes)
        return out

    return patch


def replay_fence(status: Status) -> Patch:
    return {"lease": {"renewTime": now()}, "fence": status["fence"]}


def complete_with(**result: Any) -> Step:
    def patch(status: Status) -> Patch:
        out = complete(status)
        out["result"].update(result)
        return out

    return patch


CARELESS: dict[str, Careless] = {
    "Succeeded with a fake result while another worker holds the lease": Careless(
        LEASED_BY_A, fake_complete, HOLDER_ONLY
    ),
    "lease.renewTime only, while another worker holds the lease": Careless(
        LEASED_BY_A, lambda s: {"lease": {"renewTime": now()}}, HOLDER_ONLY
    ),
    "a lease stolen in place: new token, holder, attempts + 1": Careless(
        LEASED_BY_A, steal_in_place, IN_PLACE
    ),
    "the result of a Succeeded job overwritten": Careless(
        [claim("a"), complete],
        lambda s: {"result": {"transcript": transcript_of(1, token("z", 1))}},
        RESULT_IMMUTABLE,
    ),
    "complete naming another lease's transcript (even by the holder)": Careless(
        LEASED_BY_A, complete_with(transcript=transcript_of(1, token("z", 1))), RESULT_OWN_KEY
    ),
    "a publish record on a Failed job": Careless(
        [claim("a"), fail_final], lambda s: {"published": {"time": now()}}, PUBLISHED_ONLY
    ),
    "a second publish record": Careless([claim("a"), complete, publish], publish, FINAL),
    "the publish record removed": Careless(
        [claim("a"), complete, publish], lambda s: {"published": None}, FINAL
    ),
    "a publish record that also changes the result's words": Careless(
        [claim("a"), complete],
        lambda s: {"published": {"time": now()}, "result": {"words": 9}},
        PUBLISH_ONLY_WRITE,
    ),
    "a publish record that also adds a condition": Careless(
        [claim("a"), complete],
        lambda s: {
            "published": {"time": now()},
            "conditions": [{"type": "X", "status": "True", "lastTransitionTime": now()}],
        },
        PUBLISH_ONLY_WRITE,
    ),
    "a Failed job moved back to Queued": Careless(
        [claim("a"), fail_final], lambda s: {"phase": "Queued"}, FINAL
    ),
    "a Cancelled job moved back to Queued": Careless(
        [cancel], lambda s: {"phase": "Queued"}, FINAL
    ),
    "a Cancelled job given a lastError": Careless(
        [cancel], lambda s: {"lastError": {"reason": "Oops"}}, FINAL
    ),
    "a Succeeded job's phase changed": Careless(
        [claim("a"), complete], lambda s: {"phase": "Failed", "result": None}, FINAL
    ),
    "Succeeded straight from Queued": Careless([], fake_complete, SUCCEEDED_FROM_LEASED),
    "the lease removed while the phase stays Leased (even by the holder)": Careless(
        LEASED_BY_A, with_holder_fence({"lease": None}), LEASE_IFF_LEASED
    ),
    "a stale holder's renew after a reclaim and a new claim (old token in the fence)": Careless(
        [claim("a"), reclaim, claim("b")],
        with_stale_fence("a", 1, {"lease": {"renewTime": now()}}),
        HOLDER_ONLY,
    ),
    "a stale holder's complete after a reclaim and a new claim": Careless(
        [claim("a"), reclaim, claim("b")],
        with_stale_fence("a", 1, fake_complete({})),
        HOLDER_ONLY,
    ),
    "the holder replays its last fence": Careless(LEASED_BY_A, replay_fence, HOLDER_ONLY),
    "a second claim that lost the race (built from the Queued job it read)": Careless(
        LEASED_BY_A, lambda s: claim("z")({}), HOLDER_ONLY
    ),
    "releases + 1 without a release": Careless([], lambda s: {"releases": 1}, RELEASES_BY_ONE),
    "expiredLeases + 1 without a reclaim": Careless(
        [], lambda s: {"expiredLeases": 1}, EXPIRED_BY_ONE
    ),
    "attempts decreased": Careless(
        [claim("a"), release], lambda s: {"attempts": 0}, ATTEMPTS_NEVER_DECREASE
    ),
    "failures decreased": Careless(
        [claim("a"), fail_retry], lambda s: {"failures": 0}, "status.failures never decreases"
    ),
    "attempts removed": Careless(
        [claim("a"), release], lambda s: {"attempts": None}, ATTEMPTS_NOT_REMOVED
    ),
    "an offer on a Leased job (even by the holder)": Careless(
        LEASED_BY_A, with_holder_fence({"offer": {"worker": "b"}}), OFFER_ONLY_QUEUED
    ),
    "complete with a wrong result.attempt (even by the holder)": Careless(
        LEASED_BY_A, complete_with(attempt=2), RESULT_NAMES_LEASE
    ),
    "complete with another lease's token in the result (even by the holder)": Careless(
        LEASED_BY_A, complete_with(token=token("z", 1)), RESULT_NAMES_LEASE
    ),
    "a claim that does not count its attempt": Careless(
        [], claim_with(attempts=0), ONE_ATTEMPT_PER_CLAIM
    ),
    "a claim that counts two attempts": Careless([], claim_with(attempts=2), ONE_ATTEMPT_PER_CLAIM),
    "a claim whose fence names another token": Careless(
        [], claim_with(fence=f"{token('y', 1)}/1"), FENCE_NAMES_LEASE
    ),
    "a claim of a job in retry backoff": Careless(
        [claim("a"), fail_retry], claim("z"), NO_CLAIM_IN_BACKOFF
    ),
    "a backoff put on a Queued job": Careless(
        [], lambda s: {"backoffSeconds": 3600}, BACKOFF_SET_BY_FAIL
    ),
    "Queued to Failed with attempts left": Careless([], exhaust, EXHAUST_ONLY_WHEN_SPENT),
    "a claim beyond the attempt budget": Careless(
        [claim("a"), fail_retry, clear_backoff], claim("z"), BUDGET, spec={"maxAttempts": 1}
    ),
}


@pytest.mark.parametrize("case", CARELESS.values(), ids=CARELESS.keys())
def test_careless_write__is_refused_with_the_rule(
    kube: Kube, namespace: str, case: Careless
) -> None:
    create(kube, namespace, "j", **case.spec)
    for action in case.setup:
        step(kube, namespace, "j", action, guarded=True)
    status = read(kube, namespace, "j")["status"]
    message = refusal(kube, namespace, "j", case.patch(status))
    assert case.rule in message


def test_careless_writes__leave_the_holder_working(kube: Kube, namespace: str) -> None:
    """Refused careless writes cost the holder nothing: it renews and completes as usual."""
    create(kube, namespace, "j")
    step(kube, namespace, "j", claim("a"), guarded=True)
    for patch in (fake_complete, steal_in_place, lambda s: {"lease": {"renewTime": now()}}):
        refusal(kube, namespace, "j", patch(read(kube, namespace, "j")["status"]))
    step(kube, namespace, "j", renew, guarded=True)
    status = step(kube, namespace, "j", complete, guarded=True)
    assert status["phase"] == "Succeeded"
    assert status["result"]["token"] == token("a", 1)


# -- the schema as installed ----------------------------------------------------------------


def test_crd__installs_with_every_rule_within_the_cel_cost_budget(kube: Kube) -> None:
    """The API server rejects a CRD whose rules may cost too much; this one is Established and
    serves every rule of the file."""
    crd = kube.custom.get_cluster_custom_object(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", f"{PLURAL}.{GROUP}"
    )
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions.get("Established") == "True"

    def rules(schema: Any) -> list[str]:
        if isinstance(schema, dict):
            own = [r["rule"] for r in schema.get("x-kubernetes-validations", [])]
            return own + [r for v in schema.values() for r in rules(v)]
        if isinstance(schema, list):
            return [r for v in schema for r in rules(v)]
        return []

    written = yaml.safe_load(CRD_FILE.read_text())
    assert sorted(rules(crd["spec"]["versions"])) == sorted(rules(written["spec"]["versions"]))
    assert len(rules(written)) >= 25


def test_selectable_fields__find_a_worker_s_lease_and_offer(kube: Kube, namespace: str) -> None:
    for name in ("held", "offered", "other"):
        create(kube, namespace, name)
    step(kube, namespace, "held", claim("w1"), guarded=True)
    step(kube, namespace, "offered", offer("w1"), guarded=True)
    step(kube, namespace, "other", claim("w2"), guarded=True)

    def names(selector: str) -> list[str]:
        out = kube.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, field_selector=selector
        )
        return sorted(o["metadata"]["name"] for o in out["items"])

    assert names("status.lease.holder=w1") == ["held"]
    assert names("status.offer.worker=w1") == ["offered"]
    assert names("status.phase=Queued,status.offer.worker=w1") == ["offered"]
