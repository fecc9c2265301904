"""One line per build on the terminal, the whole output in a log file (issue 20, point 5).

    with build_step("kind-image", "recall.local/kind-node:v1.37.2") as step:
        step.run(["docker", "build", ...])          # output appended to step.log

Contract:
- `build_step(tool, what)` truncates `<cache>/logs/<tool>.log` (one log per tool, the last
  build's; `append` adds to it instead), and yields a `Step` whose `run()` appends a
  command's stdout and stderr to it.
- On success it prints exactly one line to stderr when the block ends:
  `[<tool>] built <what> in <n> s; log: <path>` (or `... is up to date` via `step.cached()`,
  which makes the line say so instead). Steps that are not builds give their own verb
  ("create" / "created").
- On failure (any exception) it prints `[<tool>] FAILED to build <what> after <n> s; full log:
  <path>` and the log's last lines, then re-raises. Either line also ends the log. A failed
  command raises `BuildError` naming the command and the log.
The same words as hack/k8s-tools/build.sh, whose lines look alike.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from recall_dev.docker import cache_root


class BuildError(RuntimeError):
    """A build command failed; its output is in the step's log."""


def logs_dir() -> Path:
    d = cache_root() / "logs"
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class Step:
    """A build in progress: where its output goes, and what its line will say."""

    tool: str
    what: str
    log: Path
    notes: list[str] = field(default_factory=list)
    up_to_date: bool = False

    def run(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: IO[bytes] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Run a command, its output appended to the log; raise BuildError if it fails."""
        with self.log.open("ab") as out:
            out.write(f"\n$ {' '.join(args)}\n".encode())
            out.flush()
            done = subprocess.run(
                list(args), stdout=out, stderr=subprocess.STDOUT, stdin=stdin, env=env, cwd=cwd
            )
        if done.returncode != 0:
            raise BuildError(f"{args[0]} exited with {done.returncode} (see {self.log})")

    def write(self, text: str) -> None:
        """Add a line of our own to the log."""
        with self.log.open("a") as out:
            out.write(text.rstrip("\n") + "\n")

    def note(self, text: str) -> None:
        """Something the one line should mention (in parentheses after `what`)."""
        self.notes.append(text)

    def cached(self) -> None:
        self.up_to_date = True


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "  | (no log)"
    return "\n".join(f"  | {line}" for line in text)


@contextlib.contextmanager
def build_step(
    tool: str, what: str, *, verb: str = "build", past: str = "built", append: bool = False
) -> Iterator[Step]:
    """A build (or another long step: `verb`, `past`) that speaks one line (see the module
    contract)."""
    log = logs_dir() / f"{tool}.log"
    with log.open("a" if append else "w") as out:
        out.write(f"[{tool}] {verb} {what}: started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    step = Step(tool, what, log)
    start = time.monotonic()
    try:
        yield step
    except BaseException:
        took = time.monotonic() - start
        step.write(f"[{tool}] FAILED to {verb} {what} after {took:.0f} s")
        print(
            f"[{tool}] FAILED to {verb} {what} after {took:.0f} s; full log: {log}\n{tail(log)}",
            file=sys.stderr,
            flush=True,
        )
        raise
    took = time.monotonic() - start
    notes = f" ({'; '.join(step.notes)})" if step.notes else ""
    if step.up_to_date:
        line = f"[{tool}] {what} is up to date{notes}"
    else:
        line = f"[{tool}] {past} {what}{notes} in {took:.0f} s; log: {log}"
    step.write(line)
    print(line, file=sys.stderr, flush=True)
