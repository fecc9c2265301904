"""docs/benchmarks.md and its plots from the results of one `make bench` run (pure but for the
files it writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.compare import Figures


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*out, ""]


def _error(section: Any) -> str | None:
    return section.get("error") if isinstance(section, dict) else None


def plots(results: dict[str, Any], directory: Path) -> list[str]:
    """PNG plots under `directory`; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    tp = results.get("throughput") or {}
    limit = float((results.get("limit") or {}).get("limit") or 0)
    if tp and not _error(tp):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        for design, runs in tp.items():
            ws = sorted(int(w) for w in runs)
            left.plot(ws, [runs[w]["jobs_per_second"] for w in ws], "o-", label=f"{design}")
            right.plot(ws, [runs[w]["wasted_claims_per_claim"] for w in ws], "o-", label=design)
            if design == "offers" and limit:
                left.plot(
                    ws,
                    [limit / runs[w]["api_writes_per_job"] for w in ws],
                    "k--",
                    label="API limit ÷ writes per job",
                )
        left.set(xscale="log", xlabel="workers", ylabel="jobs/s", title="Jobs per second")
        right.set(
            xscale="log", xlabel="workers", ylabel="per successful claim", title="Wasted claims"
        )
        right.axhline(0.3, color="grey", linestyle=":", label="target 0.3")
        for ax in (left, right):
            ax.legend()
            ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(directory / "throughput.png", dpi=100)
        plt.close(fig)
        made.append("throughput.png")
    rc = results.get("reclaim") or {}
    if rc.get("delays"):
        fig, ax = plt.subplots(figsize=(6, 4))
        delays = sorted(rc["delays"])
        ax.plot(delays, [(i + 1) / len(delays) for i in range(len(delays))])
        ax.axvline(1.0, color="grey", linestyle=":", label="target p99 ≤ 1 s")
        ax.set(
            xlabel="seconds after the lease expired",
            ylabel="share of reclaims",
            title=f"Reclaim delay, {rc['expiries']} expiries among {rc['jobs_in_system']} jobs",
        )
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(directory / "reclaim.png", dpi=100)
        plt.close(fig)
        made.append("reclaim.png")
    pace = results.get("pace") or {}
    if pace and not _error(pace):
        from bench import pace as pace_section

        if pace_section.plot(pace, directory):
            made.append("pace.png")
    return made


def _rows(rows: dict[str, Any]) -> list[str]:
    """What a user applies, at the sizes that broke earlier versions."""
    if not rows or _error(rows):
        return []
    out = ["## What a user applies", ""]
    table = []
    for name, what in (
        ("inline_1000", "1,000 items, 60-character URLs (inline)"),
        ("presigned_1000", "1,000 items, ~1,450-character presigned URLs (item lists)"),
    ):
        r = rows.get(name) or {}
        if r:
            table.append(
                [
                    what,
                    f"{r['object_bytes']:,}",
                    f"{r['spec_bytes']:,}",
                    f"{r['status_bytes']:,}",
                    f"{r['managed_fields_bytes']:,}",
                    f"{r['kopf_annotation_bytes']:,}",
                    f"{r['item_lists']} ({r['largest_list_bytes']:,} B)",
                ]
            )
    out += _table(
        [
            "Batch",
            "object (B)",
            "spec",
            "status",
            "managedFields",
            "kopf annotation",
            "item lists (largest)",
        ],
        table,
    )
    hb = rows.get("heartbeat") or {}
    if hb:
        out += [
            f"Heartbeats at the default lease ({hb['lease_seconds']} s): "
            f"{hb['writes_per_second_per_job']} status writes/s per leased job "
            f"({hb['status_writes']} writes by {hb['leased_jobs']} holders in {hb['seconds']} s "
            "of one long chunk).",
            "",
        ]
    big = rows.get("oversized_spec") or {}
    if big:
        out += [
            f"A Batch applied with {big['spec_bytes']:,} bytes of inline items: {big['answer']}",
            "",
        ]
    return out


def markdown(results: dict[str, Any], plot_names: list[str]) -> str:
    run = results.get("_run", {})
    lines = [
        "# Benchmarks",
        "",
        f"Measured {run.get('when')} on {run.get('machine')}, in a `make bench` run of "
        f"{run.get('seconds')} s{' (quick sizes)' if run.get('quick') else ''}, against the local "
        "control plane (kube-apiserver v1.37 and etcd v3.6 as processes, etcd without fsync, "
        "kube-apiserver with GOGC=400 from 2026-11-30 10:00 on). "
        "Everything — API server, etcd, operator, workers, the other systems — shares the same two "
        "cores, so absolute rates are this machine's; the ratios and the shapes carry over. "
        "Regenerate with `make bench`; what each figure means is in the docstrings of `bench/`.",
        "",
    ]
    carried = run.get("carried") or {}
    if carried:
        lines += [
            "Figures of sections this run did not measure, from earlier runs: "
            + ", ".join(f"{name} ({when})" for name, when in sorted(carried.items()))
            + ".",
            "",
        ]
    lines += _rows(results.get("rows") or {})
    limit = results.get("limit") or {}
    if limit and not _error(limit):
        lines += ["## The API server's limit", ""]
        lines += [
            "Raw fenced `/status` writes (a PATCH carrying its resourceVersion and a new fence, "
            "as a lease holder sends) by N concurrent client processes:",
            "",
        ]
        lines += _table(
            ["clients", "writes/s"], [[n, r] for n, r in limit["writes_per_second"].items()]
        )
    tp = results.get("throughput") or {}
    if tp and not _error(tp):
        lines += ["## Workers", ""]
        lines += [
            "W simulated workers drain a Batch of zero-work jobs, from the Batch's creation to "
            "its Complete condition. *offers*: the operator offers each idle worker a job and a "
            "worker watches only its own offers (the default); *queue*: every worker watches every "
            "queued job and picks at random among the head of the queue (the design it replaced). "
            "Wasted claims are 409s and refused claims per successful claim. API writes are the "
            "API server's own `apiserver_request_total` for mutating verbs, divided by the jobs; "
            "the ratio compares jobs/s with (limit ÷ writes per job).",
            "",
        ]
        rows = []
        for design, runs in tp.items():
            for w in sorted(runs, key=int):
                r = runs[w]
                if _error(r):
                    continue
                rows.append(
                    [
                        design,
                        w,
                        r["jobs"],
                        r["jobs_per_second"],
                        r["wasted_claims_per_claim"],
                        r["api_writes_per_job"],
                        r["ratio_to_limit"],
                    ]
                )
        lines += _table(
            [
                "dispatch",
                "workers",
                "jobs",
                "jobs/s",
                "wasted claims/claim",
                "API writes/job",
                "ratio to limit",
            ],
            rows,
        )
        offers = tp.get("offers") or {}
        if offers:
            w = max(offers, key=int)
            lines += [f"API writes per job by kind ({w} workers, offers):", ""]
            lines += _table(
                ["request", "per job"],
                [[k, v] for k, v in offers[w]["writes_by_kind_per_job"].items()],
            )
    if "throughput.png" in plot_names:
        lines += ["![throughput](bench/throughput.png)", ""]
    pace = results.get("pace") or {}
    if pace and not _error(pace):
        from bench import pace as pace_section

        lines += pace_section.markdown(pace, "pace.png" in plot_names)
    slots = results.get("slots") or {}
    if slots and not _error(slots):
        from bench import slots as slots_section

        lines += slots_section.markdown(slots)
    batching = results.get("batching") or {}
    if batching and not _error(batching):
        from bench import batching as batching_section

        lines += batching_section.markdown(batching)
    enginecpu = results.get("enginecpu") or {}
    if enginecpu and not _error(enginecpu):
        from bench import enginecpu as enginecpu_section

        lines += enginecpu_section.markdown(enginecpu)
    gpu = results.get("gpu") or {}
    if gpu and not _error(gpu):
        from bench import gpu as gpu_section

        lines += gpu_section.markdown(gpu)
    pools = results.get("pools") or {}
    if pools and not _error(pools):
        from bench import pools as pools_section

        lines += pools_section.markdown(pools)
    fair = results.get("fairness") or {}
    if fair and not _error(fair):
        lines += ["## Fair share", ""]
        lines += [
            f"{fair['workers']} workers; jobs take {fair['job_seconds']} s. A "
            f"{fair['small_batch_items']}-item Batch alone, then behind a "
            f"{fair['big_batch_items']}-item Batch that occupies every worker; then a plain and a "
            "priority-10 Batch submitted together behind it.",
            "",
        ]
        lines += _table(
            ["case", "first claim after submit (s)", "all done after submit (s)"],
            [
                ["alone", fair["alone"]["first_claim_s"], fair["alone"]["all_done_s"]],
                [
                    "behind the big Batch",
                    fair["behind_big"]["first_claim_s"],
                    fair["behind_big"]["all_done_s"],
                ],
            ],
        )
        lines += [
            "Plain items started before the last priority-10 item: "
            f"{fair['plain_items_started_before_the_last_urgent_one']} "
            "(priority wins over fair share).",
            "",
        ]
    rc = results.get("reclaim") or {}
    if rc and not _error(rc):
        lines += ["## Reclaim delay", ""]
        lines += _table(
            ["jobs in the system", "expiries", "lease (s)", "p50 (s)", "p99 (s)", "max (s)"],
            [
                [
                    rc["jobs_in_system"],
                    rc["expiries"],
                    rc["lease_seconds"],
                    rc["p50_s"],
                    rc["p99_s"],
                    rc["max_s"],
                ]
            ],
        )
        if "reclaim.png" in plot_names:
            lines += ["![reclaim](bench/reclaim.png)", ""]
    big = {
        name: r
        for section in ("big", "huge")
        if not _error(results.get(section) or {})
        for name, r in (results.get(section) or {}).items()
    }
    if big:
        lines += ["## Big Batches", ""]
        rows = []
        for name, r in big.items():
            if _error(r):
                rows.append([name, "error: " + r["error"], "", "", "", "", ""])
                continue
            rows.append(
                [
                    f"{r['items']:,}",
                    r["workers"],
                    r["seconds"],
                    r["jobs_per_second"],
                    r["operator_rss_mib_peak"],
                    f"{r['operator_cpu_seconds']} ({100 * r['operator_cpu_share']:.0f} %)",
                    ", ".join(f"{k} {v:,}" for k, v in r["largest_object_bytes"].items()),
                ]
            )
        lines += _table(
            [
                "items",
                "workers",
                "seconds",
                "jobs/s",
                "operator RSS peak (MiB)",
                "operator CPU s (share)",
                "largest object (bytes)",
            ],
            rows,
        )
    compared: dict[str, Figures] = results.get("compare") or {}
    mine: Figures | None = results.get("versus")
    if compared and not _error(compared) and mine and not _error(mine):
        from bench.compare import render_markdown

        lines += ["## Side by side", "", render_markdown({"recall": mine, **compared}), ""]
    lines += _etcd(results.get("etcd") or {})
    transcripts = results.get("transcripts") or {}
    if transcripts and not _error(transcripts):
        from bench import transcripts as transcripts_section

        lines += transcripts_section.markdown(transcripts)
    languages = results.get("languages") or {}
    if languages and not _error(languages):
        from bench import languages as languages_section

        lines += languages_section.markdown(languages)
    for name in ("engine", "longfile"):
        section = results.get(name)
        if section and not _error(section):
            lines += [f"## {name}", ""]
            lines += _table(["measure", "value"], [[k, v] for k, v in section.items()])
    failed = [k for k, v in results.items() if _error(v)]
    if failed:
        lines += ["## Sections that failed in this run", ""]
        lines += [f"- {k}: {results[k]['error']}" for k in failed] + [""]
    return "\n".join(lines)


def _etcd(section: dict[str, Any]) -> list[str]:
    """What the work costs etcd: the earlier ConfigMap layout against the results store."""
    if not section or _error(section):
        return []
    lines = [
        "## What the work costs etcd",
        "",
        "One job through a real lease holder (a renewal with the checkpoint after every 30-second "
        "chunk, ~630 bytes of speech each), its chunks and transcript in the earlier ConfigMap "
        "layout (re-enacted by `bench/legacy.py`) and in the results store. etcd's own counters: "
        "WAL bytes written and the growth of its database (`etcd_mvcc_db_total_size_in_bytes`, "
        "before compaction); API writes from `apiserver_request_total`.",
        "",
    ]
    rows = []
    for name, r in (section.get("recordings") or {}).items():
        if _error(r):
            continue
        rows.append(
            [
                name.replace("_", ", "),
                r["chunks"],
                f"{r['etcd_wal_bytes']:,}",
                f"{r['etcd_db_growth_bytes']:,}",
                r["api_writes"],
                r["store_puts"],
                f"{r['job_bytes']:,}",
            ]
        )
    lines += _table(
        [
            "layout, length",
            "chunks",
            "etcd WAL bytes",
            "etcd db growth (bytes)",
            "API writes",
            "store puts",
            "job object (bytes)",
        ],
        rows,
    )
    both = section.get("hours") or {}
    hours = both.get("hours") or both  # a run before the ledger comparison: one Batch
    ledger = both.get("ledger") or {}
    if hours and not _error(hours):
        lines += [
            f"A Batch of {hours['items']:,} jobs whose transcripts are the size of an hour of "
            f"speech ({hours['transcript_bytes_mean']:,} bytes each, "
            f"{hours['transcript_bytes_total']:,} in all), {hours['workers']} workers, "
            f"{hours['seconds']} s: etcd's size in use grew by "
            f"{hours['etcd_in_use_growth_bytes']:,} bytes after compaction, against "
            f"{hours['ledger_bytes']:,} bytes of ledger (every job and the Batch as the API "
            "server returns them, metadata included).",
            "",
        ]
    if ledger and not _error(ledger):
        lines += [
            f"The same Batch with one-line transcripts ({ledger['transcript_bytes_mean']:,} "
            f"bytes each): etcd grew by {ledger['etcd_in_use_growth_bytes']:,} bytes — the "
            "ledger alone; the hours of speech add nothing to etcd.",
            "",
        ]
    return lines


def write(results: dict[str, Any], out: Path, plot_dir: Path) -> None:
    names = plots(results, plot_dir)
    out.write_text(markdown(results, names))
    (plot_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
