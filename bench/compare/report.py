"""The figures one compared system yields, and their markdown rendering (pure).

`Figures` is the dict every `*_figures()` function returns; `render_markdown()` puts any
number of them side by side, one column per system, so recall's own figures can be given in
the same shape and rendered in the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict


class Zombie(TypedDict):
    """A worker frozen (SIGSTOP) past its timeout while another re-ran its job, then resumed."""

    resumed: str  # "during_rerun" or "after_rerun": when the frozen worker got SIGCONT
    accepted: bool | None  # its late completion recorded as the job's result; None: no re-run
    evidence: str  # what the system's own records showed


class Figures(TypedDict):
    system: str  # name and version of the queue and of its server
    jobs: int  # zero-work jobs drained per worker count
    jobs_per_second: dict[int, float]  # by number of worker processes
    kill_to_rerun_seconds: dict[str, float | None]  # "defaults", "best", ...; None: not in wait
    kill_wait_seconds: float  # how long a re-run was waited for
    documented_rerun: dict[str, str]  # the documented kill-to-re-run time at each setting
    zombie: list[Zombie]
    zombie_result_accepted: bool | None  # the "during_rerun" case: the zombie wakes mid re-run
    settings: dict[str, dict[str, Any]]  # "throughput", "defaults", "best"
    sources: list[str]  # where the documented defaults come from
    notes: list[str]


def _seconds(value: float | None, wait: float) -> str:
    if value is None:
        return f"not re-run within {wait:.0f} s"
    return f"{value:.1f} s"


def _yes_no(value: bool | None) -> str:
    if value is None:
        return "n/a (no re-run)"
    return "**yes**" if value else "no"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(results: Mapping[str, Figures]) -> str:
    """A table with one column per system, then the settings and evidence behind it."""
    names = list(results)
    if not names:
        return ""
    rows: list[tuple[str, list[str]]] = [("system", [results[n]["system"] for n in names])]
    counts = sorted({w for n in names for w in results[n]["jobs_per_second"]})
    for w in counts:
        label = f"jobs/s, {w} worker{'s' if w != 1 else ''}"
        cells = []
        for n in names:
            rate = results[n]["jobs_per_second"].get(w)
            cells.append("—" if rate is None else f"{rate:.0f}")
        rows.append((label, cells))
    cases = ["defaults", "best"]
    cases += [c for n in names for c in results[n]["kill_to_rerun_seconds"] if c not in cases]
    for case in cases:
        cells = []
        for n in names:
            fig = results[n]
            if case not in fig["kill_to_rerun_seconds"]:
                cells.append("—")
                continue
            measured = _seconds(fig["kill_to_rerun_seconds"][case], fig["kill_wait_seconds"])
            documented = fig["documented_rerun"].get(case)
            cells.append(f"{measured} (documented: {documented})" if documented else measured)
        rows.append((f"kill -9 → job running again, {case}", cells))
    rows.append(
        (
            "zombie's late result accepted",
            [_yes_no(results[n]["zombie_result_accepted"]) for n in names],
        )
    )
    lines = [
        "| | " + " | ".join(_cell(n) for n in names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    lines += [f"| {label} | " + " | ".join(_cell(c) for c in cells) + " |" for label, cells in rows]
    for n in names:
        fig = results[n]
        lines += ["", f"**{n}** ({fig['system']})", ""]
        for setting, values in fig["settings"].items():
            shown = ", ".join(f"`{k}={v}`" for k, v in values.items())
            lines.append(f"- settings, {setting}: {shown}")
        for zombie in fig["zombie"]:
            lines.append(
                f"- zombie resumed {zombie['resumed'].replace('_', ' ')}: "
                f"accepted {_yes_no(zombie['accepted'])}; {zombie['evidence']}"
            )
        lines += [f"- {note}" for note in fig["notes"]]
        if fig["sources"]:
            lines.append("- documented defaults: " + ", ".join(f"<{s}>" for s in fig["sources"]))
    return "\n".join(lines) + "\n"
