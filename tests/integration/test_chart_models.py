"""The chart sets up the workers' model cache: an emptyDir by default (one copy per pod, counted
in its ephemeral storage), a hostPath on request (one copy per node, shared by every worker pod
there), mounted where RECALL_WORKER_MODEL_CACHE_DIR points; the schema refuses anything else.

A hostPath cache comes with an init container that gives the node's directory (created by the
kubelet owned by root) to the workers' UID and GID, as root with CAP_CHOWN alone; no other
cache has one, and the pools inherit it with their modelCache. What the rendering cannot show
(that the chown makes the directory writable on a real node, and that two pods share one copy)
is the pod test's: tests/e2e/pods/test_pods.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_chart import Tools, container, env_of, find, tools, values_file

pytestmark = pytest.mark.integration
__all__ = ["tools"]  # the fixture, shared with test_chart.py

CACHE = "/var/cache/recall/models"


def cache_of(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], str]:
    worker = find(docs, "Deployment", "-worker")
    wk = container(worker)
    [mount] = [m for m in wk["volumeMounts"] if m["name"] == "model-cache"]
    [volume] = [
        v for v in worker["spec"]["template"]["spec"]["volumes"] if v["name"] == "model-cache"
    ]
    return mount, volume, env_of(wk)["RECALL_WORKER_MODEL_CACHE_DIR"]


def test_template_model_cache__an_emptydir_by_default(tools: Tools, tmp_path: Path) -> None:
    docs = tools.render(tmp_path)
    mount, volume, env = cache_of(docs)
    assert mount["mountPath"] == env == CACHE
    assert volume == {"name": "model-cache", "emptyDir": {"sizeLimit": "2Gi"}}
    limits = container(find(docs, "Deployment", "-worker"))["resources"]["limits"]
    assert limits["ephemeral-storage"] == "7Gi"  # above /tmp (4Gi) and the cache (2Gi)


def init_containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = deployment["spec"]["template"]["spec"].get("initContainers", [])
    return found


def test_template_model_cache__a_hostpath_shared_on_the_node(tools: Tools, tmp_path: Path) -> None:
    values = {"worker": {"modelCache": {"volume": "hostPath", "hostPath": "/srv/models"}}}
    docs = tools.render(tmp_path, values)
    mount, volume, env = cache_of(docs)
    assert mount["mountPath"] == env == CACHE
    assert volume == {
        "name": "model-cache",
        "hostPath": {"path": "/srv/models", "type": "DirectoryOrCreate"},
    }
    worker = find(docs, "Deployment", "-worker")
    [owner] = init_containers(worker)
    assert owner["name"] == "model-cache-owner"
    assert owner["image"] == container(worker)["image"]  # the worker's own image: no other pull
    assert owner["command"] == ["chown", "10001:10001", CACHE]  # the directory, not its files
    assert owner["volumeMounts"] == [{"name": "model-cache", "mountPath": CACHE}]
    # Root, for the chown of a directory root owns; nothing more than CAP_CHOWN.
    assert owner["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
    }
    pod = worker["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True  # the worker itself still is not root
    assert "runAsUser" not in container(worker).get("securityContext", {})
    resources = owner["resources"]
    for kind in ("requests", "limits"):
        assert set(resources[kind]) == {"cpu", "memory", "ephemeral-storage"}
    assert resources["limits"] == {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "16Mi"}


def test_template_model_cache__the_init_container_gives_the_directory_to_the_pods_user(
    tools: Tools, tmp_path: Path
) -> None:
    values = {
        "worker": {"modelCache": {"volume": "hostPath"}},
        "podSecurityContext": {"runAsUser": 20000, "runAsGroup": 20001},
    }
    [owner] = init_containers(find(tools.render(tmp_path, values), "Deployment", "-worker"))
    assert owner["command"] == ["chown", "20000:20001", CACHE]


def test_template_model_cache__no_init_container_for_an_emptydir_or_when_turned_off(
    tools: Tools, tmp_path: Path
) -> None:
    assert not init_containers(find(tools.render(tmp_path), "Deployment", "-worker"))
    off = {"worker": {"modelCache": {"volume": "hostPath", "hostPathInit": {"enabled": False}}}}
    docs = tools.render(tmp_path, off)
    assert "hostPath" in cache_of(docs)[1]
    assert not init_containers(find(docs, "Deployment", "-worker"))


@pytest.mark.parametrize(
    ("worker", "pool", "expected"),
    [
        # The pool inherits the default pool's hostPath cache and its init container ...
        ({"volume": "hostPath"}, None, {"default": True, "gpu": True}),
        # ... or asks for its own (a GPU pool with a large model), merged key by key ...
        (None, {"volume": "hostPath"}, {"default": False, "gpu": True}),
        # ... or keeps an emptyDir beside a hostPath default pool.
        ({"volume": "hostPath"}, {"volume": "emptyDir"}, {"default": True, "gpu": False}),
    ],
)
def test_template_model_cache__a_pool_inherits_or_sets_its_own_hostpath_and_init_container(
    tools: Tools,
    tmp_path: Path,
    worker: dict[str, Any] | None,
    pool: dict[str, Any] | None,
    expected: dict[str, bool],
) -> None:
    entry: dict[str, Any] = {"name": "gpu", "replicas": 1}
    if pool is not None:
        entry["modelCache"] = pool
    values: dict[str, Any] = {"pools": [entry]}
    if worker is not None:
        values["worker"] = {"modelCache": worker}
    docs = tools.render(tmp_path, values)
    for name, suffix in (("default", "-worker"), ("gpu", "-worker-gpu")):
        deployment = find(docs, "Deployment", suffix)
        [volume] = [
            v
            for v in deployment["spec"]["template"]["spec"]["volumes"]
            if v["name"] == "model-cache"
        ]
        assert ("hostPath" in volume) is expected[name], (name, volume)
        owners = init_containers(deployment)
        assert [c["name"] for c in owners] == (["model-cache-owner"] if expected[name] else [])
        if owners:
            assert owners[0]["image"] == container(deployment)["image"]
            assert owners[0]["securityContext"]["capabilities"] == {
                "drop": ["ALL"],
                "add": ["CHOWN"],
            }


@pytest.mark.parametrize(
    "bad",
    [
        {"volume": "persistentVolumeClaim"},
        {"hostPath": "relative/path"},
        {"size": "1Gi"},
        {"hostPathInit": {"enabled": "yes"}},
        {"hostPathInit": {"privileged": True}},
    ],
)
def test_schema__refuses_a_bad_model_cache(
    tools: Tools, tmp_path: Path, bad: dict[str, Any]
) -> None:
    values = values_file(tmp_path, {"worker": {"modelCache": bad}})
    out = tools.run(
        "helm",
        "template",
        "rc",
        str(Path(__file__).resolve().parents[2] / "charts" / "recall"),
        "--values",
        str(values),
    )
    assert out.returncode != 0 and "modelCache" in out.stderr, out.stderr
