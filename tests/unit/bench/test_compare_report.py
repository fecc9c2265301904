"""The markdown table of bench.compare: one column per system, then settings and evidence."""

from __future__ import annotations

import argparse

import pytest

from bench.compare.__main__ import _counts
from bench.compare.report import Figures, Zombie, render_markdown


def figures(**overrides: object) -> Figures:
    base = Figures(
        system="queue 1.0 on server 2.0",
        jobs=2000,
        jobs_per_second={1: 250.4, 4: 610.0},
        kill_to_rerun_seconds={"defaults": None, "best": 4.26},
        kill_wait_seconds=30.0,
        documented_rerun={"defaults": "never", "best": "3 s + sweep"},
        zombie=[
            Zombie(resumed="during_rerun", accepted=True, evidence="status=SUCCESS pid 7"),
            Zombie(resumed="after_rerun", accepted=False, evidence="unchanged"),
        ],
        zombie_result_accepted=True,
        settings={"defaults": {"acks_late": False}, "best": {"acks_late": True}},
        sources=["https://example.invalid/docs"],
        notes=["one process per worker"],
    )
    return Figures(**{**base, **overrides})  # type: ignore[typeddict-item]


def table_rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for text in markdown.splitlines():
        if text.startswith("| ") and not text.startswith("| |"):
            cells = [c.strip() for c in text.strip().strip("|").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def test_render__one_column_per_system_in_given_order() -> None:
    md = render_markdown({"A": figures(), "B": figures(system="other 3 on x")})
    assert md.splitlines()[0] == "| | A | B |"
    assert md.splitlines()[1] == "| --- | --- | --- |"
    assert table_rows(md)["system"] == ["queue 1.0 on server 2.0", "other 3 on x"]


def test_render__figures_rounded_and_bounded_waits_said() -> None:
    rows = table_rows(render_markdown({"A": figures()}))
    assert rows["jobs/s, 1 worker"] == ["250"]
    assert rows["jobs/s, 4 workers"] == ["610"]
    assert rows["kill -9 → job running again, defaults"] == [
        "not re-run within 30 s (documented: never)"
    ]
    assert rows["kill -9 → job running again, best"] == ["4.3 s (documented: 3 s + sweep)"]
    assert rows["zombie's late result accepted"] == ["**yes**"]


def test_render__missing_worker_count_and_no_rerun_zombie() -> None:
    md = render_markdown(
        {
            "A": figures(jobs_per_second={1: 100.0}, zombie_result_accepted=None),
            "B": figures(jobs_per_second={16: 900.0}, zombie_result_accepted=False),
        }
    )
    rows = table_rows(md)
    assert rows["jobs/s, 1 worker"] == ["100", "—"]
    assert rows["jobs/s, 16 workers"] == ["—", "900"]
    assert rows["zombie's late result accepted"] == ["n/a (no re-run)", "no"]


def test_render__settings_evidence_and_sources_below_the_table() -> None:
    md = render_markdown({"A": figures()})
    assert "- settings, best: `acks_late=True`" in md
    assert "- zombie resumed during rerun: accepted **yes**; status=SUCCESS pid 7" in md
    assert "- zombie resumed after rerun: accepted no; unchanged" in md
    assert "<https://example.invalid/docs>" in md


def test_render__pipes_in_text_do_not_break_the_table() -> None:
    rows = table_rows(render_markdown({"A|B": figures(system="x | y")}))
    assert rows["system"] == ["x \\| y"]


def test_render__nothing_to_render() -> None:
    assert render_markdown({}) == ""


def test_counts__parses_worker_counts() -> None:
    assert _counts("1,4,16") == (1, 4, 16)
    for bad in ("", "0,4", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            _counts(bad)


def test_render__a_kill_case_only_one_system_has() -> None:
    extra = figures(
        kill_to_rerun_seconds={"defaults": None, "best": 10.0, "child killed": 0.4},
        documented_rerun={"child killed": "at once"},
    )
    rows = table_rows(render_markdown({"A": figures(), "B": extra}))
    assert rows["kill -9 → job running again, child killed"] == ["—", "0.4 s (documented: at once)"]
    assert rows["kill -9 → job running again, best"][1] == "10.0 s"
