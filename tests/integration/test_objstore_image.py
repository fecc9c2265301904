"""The object store's image (recall_dev.objstore_image): built once, weed alone, runnable.

Needs a Docker engine (the running one, or dockerd to start a private one; root)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile

import pytest

from recall_dev import objstore_image
from recall_dev.docker import docker_engine
from recall_dev.objstore import weed_bin_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("dockerd") is None or os.geteuid() != 0,
        reason="needs dockerd and root",
    ),
]


def test_image__weed_alone_built_once_and_runs_as_nonroot() -> None:
    weed = weed_bin_dir() / "weed"
    tag = objstore_image.default_tag(weed)
    assert tag.startswith("recall.local/seaweedfs:4.")
    with docker_engine() as docker:
        first = objstore_image.build(tag, docker, weed)
        assert objstore_image.build(tag, docker, weed) == first  # cached by weed's hash
        config = json.loads(
            docker.run(
                ["image", "inspect", "--format", "{{json .Config}}", tag], capture=True
            ).stdout
        )
        assert config["Entrypoint"] == ["/usr/bin/weed"] and config["User"] == "65532:65532"
        ran = docker.run(["run", "--rm", "--network=none", tag, "version"], capture=True)
        assert "version 30GB 4." in ran.stdout
        archive = objstore_image.save(tag, first, docker)
        assert objstore_image.save(tag, first, docker) == archive
    with tarfile.open(archive) as tar:  # a docker save archive, as `ctr images import` takes
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest[0]["RepoTags"] == [tag]
