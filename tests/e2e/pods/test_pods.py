"""The chart on a kind cluster of three nodes: Whisper workers in pods, signals, crashes,
failover, upgrade, the spread over the nodes, a store model cached once per node (hostPath).

The tests share one release and run in file order (each submits its own Batch; the last one
uninstalls). What each shows is in its name; the timing bounds are generous on purpose (two
cores, other test runs beside us).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import jiwer
import pytest

from recall.kube.client import KubeClient as Kube
from recall.operator.reconcile.fanout import job_name
from recall.protocol import workers
from recall.resources import API_VERSION, BATCH_PLURAL, GROUP, VERSION, Phase
from recall_dev import speech
from tests.e2e.pods.conftest import CHART, NAMESPACE, PodCluster
from tests.helpers import get_batch, get_job, job_phase, wait_for

# The first test also waits for the image builds and the cluster.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

MAX_WER = 0.3
SHORT = {f"s{i}": [speech.SENTENCES[i]] for i in range(3)}


@pytest.fixture(scope="module")
def media(cluster: PodCluster) -> dict[str, str]:
    """Speech files in the workers' media volume: key → the text spoken."""
    spoken: dict[str, list[str]] = dict(SHORT)
    try:
        for key, sentences in SHORT.items():
            speech.synthesize(sentences, cluster.media_dir / f"{key}.wav")
        for key in ("long-1", "long-2"):
            spoken[key] = speech.speak_for(70, cluster.media_dir / f"{key}.wav")
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))
    for path in cluster.media_dir.iterdir():
        path.chmod(0o644)
    return {key: " ".join(sentences) for key, sentences in spoken.items()}


@pytest.fixture(scope="module")
def up(release: str, media: dict[str, str]) -> dict[str, str]:
    """The installed release and the media: what every test needs."""
    return media


def submit(
    kube: Kube, name: str, items: dict[str, str], *, lease: int = 60, model: str | None = None
) -> None:
    """A Batch of `items` (key → media file name), transcribed by Whisper in 10 s chunks (with
    `model`, else the workers' own)."""
    manifest = {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name},
        "spec": {
            "defaults": {
                "language": "en",
                "leaseDurationSeconds": lease,
                # A checkpoint every second: the tests below find jobs mid-way by their
                # progress, which a renewal carries at most this often.
                "checkpointSeconds": 1,
                "maxAttempts": 5,
                "engine": {
                    "name": "whisper",
                    "chunkSeconds": 10,
                    **({"model": model} if model else {}),
                },
            },
            "items": [
                {"key": key, "source": {"url": f"file:///media/{file}.wav"}}
                for key, file in items.items()
            ],
        },
    }
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, BATCH_PLURAL, manifest)


def wait_complete(kube: Kube, name: str, timeout: float = 300) -> Any:
    def complete() -> Any:
        batch = get_batch(kube, NAMESPACE, name)
        return batch if batch.status.complete else None

    return wait_for(
        complete,
        timeout=timeout,
        interval=1,
        message=lambda: f"Batch {name} to complete: {get_batch(kube, NAMESPACE, name).status}",
    )


def in_operator(cluster: PodCluster, *command: str) -> str:
    """`command` run in a ready operator pod: it has the results store's address and keys (the
    store is a pod of the cluster: nothing outside reaches it)."""
    pod = next(
        p["metadata"]["name"]
        for p in cluster.pods("operator")
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )
    done = cluster.run(
        "kubectl", "exec", "-n", NAMESPACE, pod, "-c", "operator", "--", *command, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)} in {pod}: {done.stdout}{done.stderr}"
    return done.stdout


def transcript(cluster: PodCluster, job: str) -> str:
    """The accepted transcript of `job`, as `recall transcript` prints it (in the cluster)."""
    return in_operator(cluster, "recall", "transcript", job, "--namespace", NAMESPACE)


def wer(reference: str, hypothesis: str) -> float:
    return float(jiwer.wer(speech.normalise(reference), speech.normalise(hypothesis)))


def leased_mid_job(kube: Kube, job: str) -> tuple[str, int] | None:
    """(holder, chunks done) once the job is leased with a chunk done and three still to do."""
    found = kube.get_job(NAMESPACE, job)
    if found is None:
        return None  # the operator has not created it yet
    status = found.status
    progress, lease = status.progress, status.lease
    if status.phase != Phase.LEASED or lease is None or progress is None:
        return None
    if 1 <= progress.chunks_done <= progress.chunks_total - 3:
        return lease.holder, progress.chunks_done
    return None


STORE_KEYS = """
import sys
from recall.base.settings import StoreSettings
from recall.bucket import Stores
from recall.transcripts import namespace_prefix
results = Stores(StoreSettings()).results()
for o in results.list(namespace_prefix(sys.argv[1])):
    print(o.key)
"""


def store_keys(cluster: PodCluster, job: str) -> list[str]:
    """The keys the results store holds for `job` (read from an operator pod)."""
    out = in_operator(cluster, "python3", "-c", STORE_KEYS, NAMESPACE)
    return sorted(k for k in out.split() if k.split("/")[2:3] == [job])


def log_events(cluster: PodCluster, pod: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of a pod's worker container with this event name."""
    return cluster.worker_events(NAMESPACE, pod, event)


# Run in an operator pod (the operator's store identity writes anywhere in the bucket; the image
# holds the bundled model): the bundled tiny.en uploaded with its SHA256SUMS to the URL given,
# as a team uploads a model; prints the digest a worker will find for it.
UPLOAD_MODEL = """
import sys
from recall.base.settings import StoreSettings
from recall.bucket import Stores
from recall.engines.models import MANIFEST, digest_of, manifest, parse_manifest
from recall.engines.whisper import bundled_path
source, url = bundled_path(), sys.argv[1]
raw = manifest(source)
entries = parse_manifest(raw, url)
bucket = Stores(StoreSettings()).open(url.rstrip("/"))
for name in sorted(entries):
    bucket.put(name, (source / name).read_bytes())
bucket.put(MANIFEST, raw)
print(digest_of(entries))
"""


def registrations(cluster: PodCluster) -> dict[str, workers.Registered]:
    """The workers' registration Leases, by worker (pod) name."""
    out = cluster.kubectl(
        "get", "leases", "-n", NAMESPACE, "-l", workers.SELECTOR, "-o", "json"
    )  # fmt: skip
    found = [workers.read(lease) for lease in json.loads(out)["items"]]
    return {r.worker: r for r in found}


def operator_writes(cluster: PodCluster) -> dict[str, float]:
    """Per running operator pod: its Batch status writes (recall_batch_status_writes_total),
    read through the API server's pod proxy."""
    writes: dict[str, float] = {}
    for pod in cluster.pods("operator"):
        meta, status = pod["metadata"], pod["status"]
        assert isinstance(meta, dict) and isinstance(status, dict)
        if status.get("phase") != "Running" or meta.get("deletionTimestamp"):
            continue
        name = meta["name"]
        raw = cluster.run(
            "kubectl", "get", "--raw",
            f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:9090/proxy/metrics", check=False,
        )  # fmt: skip
        if raw.returncode != 0:
            continue
        total = 0.0
        for line in raw.stdout.splitlines():
            if line.startswith("recall_batch_status_writes_total"):
                total += float(line.rsplit(" ", 1)[1])
        writes[name] = total
    return writes


# -- the tests ---------------------------------------------------------------------------------


def test_worker_pod__non_root_read_only_root_isolated_network_threads_from_cpu_limit(
    cluster: PodCluster, up: dict[str, str]
) -> None:
    worker = cluster.pods("worker")[0]["metadata"]
    assert isinstance(worker, dict)
    probe = (
        "import os, pathlib\n"
        "print(os.getuid(), os.environ['RECALL_WORKER_WHISPER_THREADS'],"
        " os.environ['KUBERNETES_SERVICE_HOST'])\n"
        "try:\n    open('/probe', 'w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
        "import recall.engines.whisper as w\n"
        "m = w.bundled_path() / 'model.bin'\n"
        "print('model', m, m.exists())\n"
        # The pod's routing table, read from /proc: sending nothing.
        "print('routes', [l.split()[1] for l in open('/proc/net/route').read().splitlines()[1:]])\n"
    )
    out = cluster.kubectl(
        "exec", "-n", NAMESPACE, worker["name"], "-c", "worker", "--", "python3", "-c", probe
    ).splitlines()
    uid, threads, service_host = out[0].split()
    assert uid == "10001"
    assert threads == "1", "the Whisper threads follow the CPU limit (1), not the node's cores"
    assert out[1] == "ro 30", "the root filesystem is read-only (EROFS)"
    assert out[2].startswith("model /") and out[2].endswith(" True"), "the bundled model is inside"
    routes = json.loads(out[3].removeprefix("routes ").replace("'", '"'))
    assert "00000000" not in routes, "a pod must have no default route"
    assert service_host == cluster.kubectl(
        "get", "svc", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}"
    )


def test_topology_spread__more_workers_than_nodes_land_within_a_skew_of_one(
    cluster: PodCluster, up: dict[str, str]
) -> None:
    """The chart's spread, as the Deployments in the cluster carry it (one ScheduleAnyway
    constraint over kubernetes.io/hostname, maxSkew 1, counted per revision, on nodes whose
    taints the pods tolerate), and what it makes the scheduler do: the workers scaled to five
    on three nodes land two, two and one (the scheduler's own default spreading, maxSkew 3,
    allows three, one and one); the two operators on two nodes; the store where the values put
    it. The workers go back to two afterwards."""
    deployments = json.loads(cluster.kubectl("get", "deployments", "-n", NAMESPACE, "-o", "json"))
    for component in ("worker", "operator"):
        (deployment,) = [
            d
            for d in deployments["items"]
            if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
            == component
        ]
        template = deployment["spec"]["template"]
        (spread,) = template["spec"]["topologySpreadConstraints"]
        assert (spread["maxSkew"], spread["topologyKey"], spread["whenUnsatisfiable"]) == (
            1,
            "kubernetes.io/hostname",
            "ScheduleAnyway",
        )
        assert spread["matchLabelKeys"] == ["pod-template-hash"]
        assert spread["nodeTaintsPolicy"] == "Honor"
        assert (
            spread["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        )
    operators = [p["spec"].get("nodeName") for p in cluster.pods("operator")]
    assert len(operators) == 2 and len(set(operators)) == 2, f"operators on {operators}"
    (store,) = cluster.pods("store")
    assert store["spec"]["nodeName"] == cluster.kind.control_plane

    replicas = 2 * len(cluster.kind.nodes) - 1
    scale = ("scale", "deployment/recall-worker", "-n", NAMESPACE)
    cluster.kubectl(*scale, f"--replicas={replicas}")
    try:

        def scheduled() -> list[str] | None:
            pods = [p for p in cluster.pods("worker") if not p["metadata"].get("deletionTimestamp")]
            nodes = [str(p["spec"].get("nodeName") or "") for p in pods]
            return nodes if len(nodes) == replicas and all(nodes) else None

        nodes = wait_for(
            scheduled, timeout=120, interval=0.5, message=f"{replicas} workers scheduled"
        )
    finally:
        cluster.kubectl(*scale, "--replicas=2")
        cluster.kubectl(
            "rollout", "status", "deployment/recall-worker", "-n", NAMESPACE, "--timeout=300s"
        )
    per_node = {node: nodes.count(node) for node in cluster.kind.nodes}
    assert max(per_node.values()) - min(per_node.values()) <= 1, f"workers per node: {per_node}"


def test_batch_of_speech__completes_through_whisper_pods_with_right_transcripts(
    cluster: PodCluster, kube: Kube, up: dict[str, str]
) -> None:
    submit(kube, "speech", {key: key for key in SHORT})
    batch = wait_complete(kube, "speech", timeout=300)
    assert batch.status.counts.completed == len(SHORT)
    workers = {p["metadata"]["name"] for p in cluster.pods("worker")}
    for key in SHORT:
        job = get_job(kube, NAMESPACE, job_name("speech", key))
        assert job.status.phase == Phase.SUCCEEDED
        assert job.status.result is not None and job.status.result.worker in workers
        rate = wer(up[key], transcript(cluster, job.name))
        assert rate <= MAX_WER, f"{key}: WER {rate:.2f}: {transcript(cluster, job.name)!r}"


def test_worker_pod_deleted_mid_job__releases_and_the_job_resumes_from_its_checkpoint(
    cluster: PodCluster, kube: Kube, up: dict[str, str]
) -> None:
    job = job_name("drain", "long")
    # A long lease: only a release (not a reclaim) can requeue the job within the bounds below.
    submit(kube, "drain", {"long": "long-1"}, lease=120)
    victim, done = wait_for(
        lambda: leased_mid_job(kube, job), timeout=180, interval=0.2,
        message=f"{job} leased with progress",
    )  # fmt: skip
    cluster.kubectl("delete", "pod", "-n", NAMESPACE, victim, "--wait=false")

    def released() -> bool:
        status = get_job(kube, NAMESPACE, job).status
        return status.lease is None or status.lease.holder != victim

    wait_for(released, timeout=40, interval=0.2, message=f"{victim} to release {job}")
    wait_complete(kube, "drain", timeout=300)
    status = get_job(kube, NAMESPACE, job).status
    assert status.phase == Phase.SUCCEEDED
    assert status.expired_leases == 0, "released on SIGTERM, not reclaimed after expiry"
    assert status.releases >= 1
    assert status.result is not None and status.result.worker != victim
    assert status.result.attempt == status.attempts == 2
    resumed = [
        r for r in log_events(cluster, status.result.worker or "", "resumed") if r.get("job") == job
    ]
    assert resumed, f"{status.result.worker} did not resume {job} from its checkpoint"
    assert resumed[-1]["chunks_done"] >= done >= 1
    rate = wer(up["long-1"], transcript(cluster, job))
    assert rate <= MAX_WER, f"WER {rate:.2f} after the resume"


def test_worker_container_killed_hard__its_lease_is_reclaimed_after_expiry(
    cluster: PodCluster, kube: Kube, up: dict[str, str]
) -> None:
    job = job_name("crash", "long")
    lease = 15
    submit(kube, "crash", {"long": "long-2"}, lease=lease)
    holder, _ = wait_for(
        lambda: leased_mid_job(kube, job), timeout=180, interval=0.2,
        message=f"{job} leased with progress",
    )  # fmt: skip
    pod = json.loads(cluster.kubectl("get", "pod", "-n", NAMESPACE, holder, "-o", "json"))
    container = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "worker")
    killed_at = time.monotonic()
    cluster.kill_container(container["containerID"].split("://", 1)[1])

    wait_for(
        lambda: get_job(kube, NAMESPACE, job).status.expired_leases >= 1,
        timeout=lease + 60, interval=0.5, message=f"the operator to reclaim {job}",
    )  # fmt: skip
    assert time.monotonic() - killed_at >= lease * 0.5, "reclaimed before the lease could expire"
    wait_complete(kube, "crash", timeout=300)
    status = get_job(kube, NAMESPACE, job).status
    assert status.phase == Phase.SUCCEEDED
    assert status.result is not None and (status.result.attempt or 0) >= 2
    restarted = json.loads(cluster.kubectl("get", "pod", "-n", NAMESPACE, holder, "-o", "json"))
    counts = [c["restartCount"] for c in restarted["status"]["containerStatuses"]]
    assert max(counts) >= 1, "the kubelet restarted the killed container"
    rate = wer(up["long-2"], transcript(cluster, job))
    assert rate <= MAX_WER, f"WER {rate:.2f} after the reclaim"


def test_active_operator_deleted__the_other_replica_takes_over(
    cluster: PodCluster, kube: Kube, up: dict[str, str]
) -> None:
    before = operator_writes(cluster)
    assert len(before) == 2, f"two operator replicas run: {before}"
    submit(kube, "ha-1", {"a": "s0"})
    wait_complete(kube, "ha-1", timeout=180)
    after = operator_writes(cluster)
    active = [pod for pod in after if after[pod] > before.get(pod, 0)]
    assert len(active) == 1, f"exactly one operator acts: {before} → {after}"

    cluster.kubectl("delete", "pod", "-n", NAMESPACE, active[0], "--wait=false")
    submit(kube, "ha-2", {"a": "s1", "b": "s2"})
    batch = wait_complete(kube, "ha-2", timeout=240)
    assert batch.status.counts.completed == 2
    later = operator_writes(cluster)
    assert active[0] not in later
    took_over = [pod for pod in later if later[pod] > after.get(pod, 0)]
    assert took_over, f"no operator wrote Batch status after the takeover: {later}"


def test_helm_upgrade__rolls_the_workers_without_losing_or_duplicating_a_job(
    cluster: PodCluster, kube: Kube, up: dict[str, str]
) -> None:
    old = {p["metadata"]["name"] for p in cluster.pods("worker")}
    items = {"long": "long-1", "a": "s0", "b": "s1", "c": "s2"}
    submit(kube, "rollout", items)
    wait_for(
        lambda: job_phase(kube, NAMESPACE, job_name("rollout", "long")) == Phase.LEASED,
        timeout=120, interval=0.2, message="a job in flight before the upgrade",
    )  # fmt: skip
    cluster.helm(
        "upgrade", "recall", str(CHART), "--reuse-values",
        "--set-string", "worker.podAnnotations.rollout=2", "--wait", "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl(
        "rollout", "status", "deployment/recall-worker", "-n", NAMESPACE, "--timeout=300s"
    )
    batch = wait_complete(kube, "rollout", timeout=300)
    assert batch.status.counts.completed == len(items)
    assert not batch.status.counts.failed
    new = {
        p["metadata"]["name"]
        for p in cluster.pods("worker")
        if not p["metadata"].get("deletionTimestamp")
    }
    assert new and not new & old, f"the workers were not replaced: {old} → {new}"
    for key in items:
        name = job_name("rollout", key)
        status = get_job(kube, NAMESPACE, name).status
        assert status.phase == Phase.SUCCEEDED
        assert status.expired_leases == 0, f"{name} needed a reclaim during the roll"
        assert status.result is not None

        # One accepted transcript; whatever an interrupted attempt wrote is removed.
        def only_accepted(job: str = name, accepted: str = status.result.transcript) -> bool:
            return store_keys(cluster, job) == [accepted]

        wait_for(
            only_accepted,
            timeout=90, interval=2,
            message=f"{name}: only the accepted transcript {status.result.transcript}",
        )  # fmt: skip


def test_hostpath_model_cache__two_worker_pods_of_a_node_fetch_a_store_model_once(
    cluster: PodCluster, kube: Kube, up: dict[str, str]
) -> None:
    """`worker.modelCache.volume=hostPath` on a real node: the kubelet creates the directory
    owned by root, the chart's init container gives it to UID 10001, and the two worker pods
    (pinned to one node) share one checked copy of a model from the store — the bundled
    tiny.en uploaded with its SHA256SUMS to the bundled store — downloaded once for the node
    (one `model_fetched` in the two pods' logs, a `model_cached` in the other's), and every job
    of both pods records the model and its digest.

    The model is under scratch/ because the bundled store's worker identity reads nothing
    else; the operator's collection leaves it alone (no job's key has that shape). The paths
    are new for each run, so a cluster kept from an earlier run has nothing cached. Runs last
    but for the uninstall: the workers stay pinned and on the hostPath."""
    run = uuid.uuid4().hex[:8]
    url = f"s3://recall/scratch/models/tiny-en-{run}/"
    cache = f"/var/cache/recall-e2e-{run}/models"
    digest = in_operator(cluster, "python3", "-c", UPLOAD_MODEL, url).split()[-1]
    assert digest.startswith("sha256:"), digest
    node = cluster.kind.workers[0]
    cluster.helm(
        "upgrade", "recall", str(CHART), "--reuse-values",
        "--set", "worker.modelCache.volume=hostPath",
        "--set", f"worker.modelCache.hostPath={cache}",
        "--set-json", f"worker.nodeSelector={json.dumps({'kubernetes.io/hostname': node})}",
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl(
        "rollout", "status", "deployment/recall-worker", "-n", NAMESPACE, "--timeout=300s"
    )

    def pinned() -> list[dict[str, Any]] | None:
        """The two new worker pods, running on `node` with their own model loaded (their
        registrations say so: the operator offers them jobs), the old ones gone."""
        pods = cluster.pods("worker")
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if len(pods) != 2 or len(live) != 2:
            return None
        if any(p["spec"].get("nodeName") != node for p in live):
            return None
        if any(p["status"].get("phase") != "Running" for p in live):
            return None
        known = registrations(cluster)
        names = [p["metadata"]["name"] for p in live]
        loaded = [known.get(n) for n in names]
        if not all(r and r.engine_state and r.engine_state.state == "loaded" for r in loaded):
            return None
        return live

    pods = wait_for(
        pinned, timeout=300, interval=1, message=f"two worker pods on {node}, their model loaded"
    )
    names = sorted(p["metadata"]["name"] for p in pods)
    for pod in pods:
        [init] = pod["status"]["initContainerStatuses"]
        assert init["name"] == "model-cache-owner"
        assert init["state"]["terminated"]["exitCode"] == 0, init
    owner = cluster.kind.exec("stat", "-c", "%u:%g", cache, node=node).stdout.strip()
    assert owner == "10001:10001", f"{cache} on {node} is owned by {owner}"

    items = {f"m{i}": key for i, key in enumerate(["s0", "s1", "s2", "s0"])}
    submit(kube, "model-cache", items, model=url)
    batch = wait_complete(kube, "model-cache", timeout=300)
    assert batch.status.counts.completed == len(items)
    done_by = set()
    for key in items:
        status = get_job(kube, NAMESPACE, job_name("model-cache", key)).status
        assert status.phase == Phase.SUCCEEDED
        assert status.result is not None
        assert (status.result.model, status.result.model_digest) == (url, digest)
        done_by.add(status.result.worker)
    assert done_by == set(names), f"the jobs were done by {done_by}, the pods are {names}"

    def events(pod: str, event: str) -> list[dict[str, Any]]:
        return [r for r in log_events(cluster, pod, event) if r.get("url") == url]

    fetched = {pod: events(pod, "model_fetched") for pod in names}
    cached = {pod: events(pod, "model_cached") for pod in names}
    fetchers = [pod for pod in names if fetched[pod]]
    assert len(fetchers) == 1 and len(fetched[fetchers[0]]) == 1, fetched  # one download
    assert fetched[fetchers[0]][0]["digest"] == digest
    [other] = [pod for pod in names if pod != fetchers[0]]
    assert cached[other], f"{other} did not find the model in the node's cache: {cached}"
    assert not cached[fetchers[0]], "the pod that fetched the model found it cached too"
    listing = cluster.kind.exec("ls", "-A", cache, node=node).stdout.split()
    copy = digest.replace(":", "-")
    assert sorted(listing) == [copy, f"{copy}.lock"], listing  # one copy, nothing partial


def test_helm_uninstall__keeps_the_crds_and_the_jobs(
    cluster: PodCluster, kube: Kube, up: dict[str, str]
) -> None:
    jobs = cluster.kubectl("get", "tj", "-n", NAMESPACE, "-o", "name").split()
    batches = cluster.kubectl("get", "rb", "-n", NAMESPACE, "-o", "name").split()
    assert len(batches) >= 5 and len(jobs) >= len(batches)
    cluster.helm("uninstall", "recall", "--wait", "--timeout", "2m")
    for crd in ("transcriptionjobs.recall.dev", "batches.recall.dev"):
        cluster.kubectl("get", "crd", crd)
    assert cluster.kubectl("get", "tj", "-n", NAMESPACE, "-o", "name").split() == jobs
    assert cluster.kubectl("get", "rb", "-n", NAMESPACE, "-o", "name").split() == batches
    assert not cluster.kubectl("get", "deployments", "-n", NAMESPACE, "-o", "name").strip()
