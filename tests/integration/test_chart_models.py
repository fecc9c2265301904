"""The chart sets up the workers' model cache: an emptyDir by default (one copy per pod, counted
in its ephemeral storage), a hostPath on request (one copy per node, shared by every worker pod
there), mounted where RECALL_WORKER_MODEL_CACHE_DIR points; the schema refuses anything else."""

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


def test_template_model_cache__a_hostpath_shared_on_the_node(tools: Tools, tmp_path: Path) -> None:
    values = {"worker": {"modelCache": {"volume": "hostPath", "hostPath": "/srv/models"}}}
    mount, volume, env = cache_of(tools.render(tmp_path, values))
    assert mount["mountPath"] == env == CACHE
    assert volume == {
        "name": "model-cache",
        "hostPath": {"path": "/srv/models", "type": "DirectoryOrCreate"},
    }


@pytest.mark.parametrize(
    "bad",
    [{"volume": "persistentVolumeClaim"}, {"hostPath": "relative/path"}, {"size": "1Gi"}],
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
