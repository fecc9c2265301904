"""The CUDA image (`make image-cuda`, recall_dev.image's cuda variant): what can be shown
without a GPU.

The image is built as `make image-cuda` builds it (offline, from the locked wheels; a second
build is up to date) and run on the build daemon with no network and a read-only root
filesystem, as the chart runs it:
- `recall --help` runs;
- CTranslate2 imports at the locked version, and every CUDA library that libctranslate2 names
  loads (ctypes.CDLL: loading needs no GPU) from the NVIDIA wheels through LD_LIBRARY_PATH,
  except the driver's libcuda.so.1 (the NVIDIA container runtime mounts it from the node) and
  NCCL (tensor parallelism only). The names are read from the library itself, so a CTranslate2
  that needs a new library (cuDNN again, say) fails here until its wheel is locked;
- CTranslate2 finds no CUDA device here (its CUDA runtime starts and finds no driver), and a
  worker configured for `device: cuda` refuses to start, saying what to check.

What only a GPU can show (docs/gpu.md): CTranslate2's CUDA kernels running on the driver,
float16 and int8_float16 on a device, a GPU's throughput and memory, and the NVIDIA container
runtime mounting the driver into this image.

Needs dockerd and root. Cold, the CUDA layer costs about a minute beside the CPU image, which
`make test` builds anyway for the kind tests (docs/gpu.md has the figures).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from recall_dev import image
from recall_dev.docker import DockerEngine, docker_engine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # a cold build downloads cuBLAS (570 MB)
    pytest.mark.skipif(
        shutil.which("dockerd") is None or os.geteuid() != 0,
        reason="needs dockerd and root",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
TAG = image.default_tag("cuda")
WHEELS = "/opt/recall/lib/python3.11/site-packages/nvidia/"
# Named by libctranslate2 but not the image's to provide: the node's driver, and NCCL, which
# CTranslate2 loads only to split one model over several GPUs.
NOT_SHIPPED = {"libcuda.so.1", "libnccl.so.2"}

# Run in the image: what CTranslate2 is, which CUDA libraries its library names, where each
# loads from, and how many CUDA devices it sees.
PROBE = r"""
import ctypes, glob, json, os, re
import ctranslate2
libs = os.path.join(os.path.dirname(os.path.dirname(ctranslate2.__file__)), "ctranslate2.libs")
(library,) = glob.glob(os.path.join(libs, "libctranslate2-*.so*"))
with open(library, "rb") as f:
    names = sorted({n.decode() for n in re.findall(rb"lib(?:cu|nccl|nv)\w*\.so\.\d+", f.read())})
skip = set(json.loads(os.environ["NOT_SHIPPED"]))
loaded, failed = {}, {}
for name in names:
    if name in skip:
        continue
    try:
        ctypes.CDLL(name)
    except OSError as e:
        failed[name] = str(e)
with open("/proc/self/maps") as f:
    for line in f:
        path = line.split()[-1]
        base = os.path.basename(path)
        if re.match(r"lib(cu|nv)\w*\.so", base):
            loaded.setdefault(base, path)
print(json.dumps({
    "version": ctranslate2.__version__,
    "names": names,
    "loaded": loaded,
    "failed": failed,
    "devices": ctranslate2.get_cuda_device_count(),
}))
"""


def locked_version(package: str) -> str:
    found = re.search(rf"^{package}==(\S+)", (ROOT / image.LOCK_FILE).read_text(), re.MULTILINE)
    assert found, f"{package} is not in {image.LOCK_FILE}"
    return found.group(1)


@pytest.fixture(scope="module")
def docker() -> Iterator[DockerEngine]:
    with docker_engine() as engine:
        yield engine


@pytest.fixture(scope="module")
def cuda_image(docker: DockerEngine) -> str:
    return image.build(TAG, docker, variant="cuda")


def run(docker: DockerEngine, *args: str, timeout: float = 300) -> tuple[int, str]:
    """`docker run` of the CUDA image as the chart runs it (read-only, /tmp writable, no
    network); the container is removed also when the deadline passes."""
    name = f"recall-cuda-test-{uuid.uuid4().hex[:8]}"
    try:
        done = docker.run(
            ["run", "--rm", "--name", name, "--network=none", "--read-only", "--tmpfs", "/tmp",
             *args],
            capture=True, check=False, timeout=timeout,
        )  # fmt: skip
    finally:
        docker.run(["rm", "--force", name], capture=True, check=False)
    return done.returncode, done.stdout + done.stderr


def layers(docker: DockerEngine, ref: str) -> list[str]:
    out = docker.run(["image", "inspect", "--format", "{{json .RootFS.Layers}}", ref], capture=True)
    return list(json.loads(out.stdout))


def test_cuda_image__built_offline_and_cached_the_second_time(
    docker: DockerEngine, cuda_image: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = layers(docker, cuda_image)
    capsys.readouterr()
    again = image.build(TAG, docker, variant="cuda")
    # The project's wheel is built from the checkout, stamped with its last commit's time: a
    # commit or an edit in between remakes the project's layer (the last), and nothing below.
    assert layers(docker, again)[:-1] == first[:-1], "the CUDA wheels were installed again"
    if again == cuda_image:
        assert f"[image-cuda] {TAG} is up to date" in capsys.readouterr().err
    env = json.loads(
        docker.run(
            ["image", "inspect", "--format", "{{json .Config.Env}}", TAG], capture=True
        ).stdout
    )
    assert any(e.startswith("LD_LIBRARY_PATH=" + WHEELS) for e in env), env


def test_cuda_image__recall_runs(docker: DockerEngine, cuda_image: str) -> None:
    code, output = run(docker, TAG, "--help")
    assert code == 0, output
    assert "worker" in output and "operator" in output


def test_cuda_image__ctranslate2_loads_its_cuda_libraries_from_the_wheels(
    docker: DockerEngine, cuda_image: str
) -> None:
    code, output = run(
        docker, "--env", f"NOT_SHIPPED={json.dumps(sorted(NOT_SHIPPED))}",
        "--entrypoint", "python", TAG, "-c", PROBE,
    )  # fmt: skip
    assert code == 0, output
    found = json.loads(output.strip().splitlines()[-1])
    assert found["version"] == locked_version("ctranslate2")
    assert "libcublas.so.12" in found["names"], found["names"]
    assert found["failed"] == {}, "locked in hack/image/requirements-cuda.in?"
    for name in set(found["names"]) - NOT_SHIPPED:
        assert found["loaded"][name].startswith(WHEELS), found["loaded"]
    assert found["loaded"]["libcublasLt.so.12"].startswith(WHEELS), "cuBLAS's own dependency"
    assert found["devices"] == 0, "no GPU here"


def test_cuda_image__a_cuda_worker_without_a_gpu_refuses_to_start_and_auto_takes_the_cpu(
    docker: DockerEngine, cuda_image: str
) -> None:
    store = ("--env", "RECALL_STORE_URL=file:///tmp/results")
    worker = (TAG, "worker", "--engine", "whisper")
    code, output = run(docker, *store, *worker, "--device", "cuda", timeout=120)
    assert code == 1, output
    assert "no CUDA device is visible" in output and "nvidia.com/gpu" in output, output
    # auto: the engine is made (on the CPU); the worker goes on and stops at the kubeconfig.
    code, output = run(docker, *store, *worker, "--device", "auto", timeout=120)
    assert code == 1 and "kubeconfig" in output and "CUDA" not in output, output
