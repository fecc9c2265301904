"""The chart's alerts and dashboard, checked by the tools their ecosystems use.

- The PrometheusRule, as Helm renders it, goes through `promtool check rules` and `promtool
  test rules` (promtool built from its Go module by hack/monitoring/build.sh): every alert fires
  in the case it is for and stays quiet in the case beside it.
- Every alert names only metrics recall exports, and links to its runbook: a section of
  docs/operations.md that exists.
- The Grafana dashboard passes `dashboardlint` (the Grafana Foundation SDK's strict decoding and
  dashboard-linter's rules, every query parsed by Prometheus' parser and every metric checked
  against recall's), which refuses a broken copy; the chart's ConfigMap carries it unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from recall.base import metrics
from recall_dev.cluster import tools_bin_dir
from tests.helpers import built, run_captured
from tests.unit.test_docs import _anchors

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NS = "recall"
DASHBOARD = ROOT / "charts" / "recall" / "files" / "dashboards" / "recall.json"


@pytest.fixture(scope="module")
def monitoring_bin() -> Path:
    """promtool and dashboardlint, built once and cached (hack/monitoring/build.sh)."""
    return built(ROOT / "hack" / "monitoring" / "build.sh", timeout=3600)


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    args = [str(tools_bin_dir(build=False) / "helm"), "template", "rc", str(ROOT / "charts/recall")]
    args += ["--namespace", NS]
    for key, value in values.items():
        args += ["--set", f"{key}={value}"]
    with tempfile.TemporaryDirectory() as home:  # helm's own caches, not the user's
        env = {
            **os.environ,
            "HELM_CACHE_HOME": home,
            "HELM_CONFIG_HOME": home,
            "HELM_DATA_HOME": home,
        }
        out = subprocess.run(
            args, capture_output=True, text=True, timeout=60, check=True, env=env
        ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def exported() -> set[str]:
    """The series names recall's metrics module exports."""
    names = set()
    for obj in vars(metrics).values():
        if isinstance(obj, MetricWrapperBase):
            (family,) = obj.describe()
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
            names |= {family.name + s for s in suffixes.get(family.type, [""])}
    return names


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    docs = render({"metrics.prometheusRule.enabled": "true"})
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in {"namespace": NS, **labels}.items())
    return {"series": f"{name}{{{text}}}", "values": values}


# Each alert: the case it fires in (with the labels it then carries), and a quiet one beside it.
# Two workers of two slots each, two jobs leased: one lease a worker, two slots free.
WORKERS_IDLE = [
    series("recall_jobs", "5x60", phase="Queued", component="operator"),
    series("recall_jobs", "2x60", phase="Leased", component="operator"),
    series("recall_claims_total", "3x60", component="worker", pod="w1"),
    series("recall_claims_total", "4x60", component="worker", pod="w2"),
    series("recall_worker_slots", "2x60", component="worker", pod="w1"),
    series("recall_worker_slots", "2x60", component="worker", pod="w2"),
]


def batch_items(batch: str, queued: str, done: str) -> list[dict[str, str]]:
    """A Batch's queued and completed items, as the leading operator exports them."""
    return [
        series("recall_batch_items", queued, batch=batch, phase="queued", component="operator"),
        series("recall_batch_items", done, batch=batch, phase="completed", component="operator"),
    ]


CASES: dict[str, list[tuple[str, list[dict[str, str]], str, dict[str, str] | None]]] = {
    "RecallWorkWaitingWorkersIdle": [
        (
            "queued jobs, free slots (each worker holds one lease of two), no claim",
            WORKERS_IDLE,
            "40m",
            {"severity": "warning"},
        ),
        (
            "the workers claim",
            [
                *WORKERS_IDLE[:2],
                series("recall_claims_total", "0+1x60", component="worker", pod="w1"),
                *WORKERS_IDLE[4:],
            ],
            "40m",
            None,
        ),
        (
            "every slot busy",
            [
                WORKERS_IDLE[0],
                series("recall_jobs", "4x60", phase="Leased", component="operator"),
                *WORKERS_IDLE[2:],
            ],
            "40m",
            None,
        ),
    ],
    "RecallLeasesExpiring": [
        (
            "a burst after a quiet day",
            [series("recall_reclaims_total", "0x1440 1+1x60")],
            "1470m",
            {"severity": "warning"},
        ),
        ("the usual rate", [series("recall_reclaims_total", "0+1x1500")], "1470m", None),
    ],
    "RecallStoreFailing": [
        (
            "errors for 20 minutes",
            [series("recall_store_errors_total", "0+1x30", reason="StorageAccessDenied")],
            "20m",
            {"severity": "critical", "reason": "StorageAccessDenied"},
        ),
        (
            "no new errors",
            [series("recall_store_errors_total", "5x30", reason="StorageAccessDenied")],
            "20m",
            None,
        ),
    ],
    "RecallNoOperatorLeading": [
        (
            "two standbys, no leader",
            [
                series("recall_operator_leader", "0x20", pod="a"),
                series("recall_operator_leader", "0x20", pod="b"),
            ],
            "10m",
            {"severity": "critical"},
        ),
        (
            "no operator at all",
            [series("recall_jobs", "1x20", phase="Queued")],
            "10m",
            {"severity": "critical", "namespace": NS},
        ),
        (
            "one leads",
            [
                series("recall_operator_leader", "0x20", pod="a"),
                series("recall_operator_leader", "1x20", pod="b"),
            ],
            "10m",
            None,
        ),
    ],
    "RecallFencedRejectionsRising": [
        (
            "a rise after a quiet day",
            [
                series(
                    "recall_fenced_rejections_total",
                    "0x1440 1+1x60",
                    action="complete",
                    reason="lost",
                )
            ],
            "1470m",
            {"severity": "warning"},
        ),
        (
            "the usual rate",
            [
                series(
                    "recall_fenced_rejections_total", "0+1x1500", action="complete", reason="lost"
                )
            ],
            "1470m",
            None,
        ),
    ],
    "RecallNoProgress": [
        (
            "outstanding work, no job finished for an hour",
            [
                series("recall_jobs", "3x120", phase="Queued"),
                series(
                    "recall_worker_jobs_total", "7x120", component="worker", outcome="completed"
                ),
            ],
            "100m",
            {"severity": "warning"},
        ),
        (
            "outstanding work and no worker",
            [series("recall_jobs", "3x120", phase="Leased")],
            "100m",
            {"severity": "warning"},
        ),
        (
            "jobs finish",
            [
                series("recall_jobs", "3x120", phase="Queued"),
                series(
                    "recall_worker_jobs_total", "0+1x120", component="worker", outcome="completed"
                ),
            ],
            "100m",
            None,
        ),
        ("nothing outstanding", [series("recall_jobs", "0x120", phase="Queued")], "100m", None),
    ],
    "RecallBatchNoProgress": [
        (
            "one Batch stuck for an hour, one finished, one finishing items",
            [
                *batch_items("media/stuck", "3x120", "5x120"),
                *batch_items("media/moving", "30-1x30 0x90", "0+1x30 30x90"),
                *batch_items("media/busy", "40x120", "0+1x120"),
            ],
            "100m",
            {"severity": "warning", "batch": "media/stuck"},
        ),
        (
            "its items finish",
            batch_items("media/busy", "40x120", "0+1x120"),
            "100m",
            None,
        ),
        (
            "its last item failed: nothing outstanding",
            [
                *batch_items("media/ended", "0x120", "4x120"),
                series(
                    "recall_batch_items",
                    "1x120",
                    batch="media/ended",
                    phase="failed",
                    component="operator",
                ),
            ],
            "100m",
            None,
        ),
        (
            "suspended",
            [
                *batch_items("media/held", "3x120", "5x120"),
                series("recall_batch_suspended", "1x120", batch="media/held", component="operator"),
            ],
            "100m",
            None,
        ),
        (
            "younger than an hour",
            batch_items("media/new", "_x69 3x50", "_x69 0x50"),
            "100m",
            None,
        ),
    ],
    "RecallApiThrottled": [
        (
            "one 429 a second",
            [series("recall_api_throttled_total", "0+60x40", verb="patch")],
            "30m",
            {"severity": "warning"},
        ),
        ("a few", [series("recall_api_throttled_total", "0+6x40", verb="patch")], "30m", None),
    ],
}


def expand(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations as Prometheus fills them in for an alert of these labels."""
    return {
        k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], v)
        for k, v in rule["annotations"].items()
    }


def test_alerts__each_fires_in_its_case_and_stays_quiet_beside_it(
    rules: list[dict[str, Any]], monitoring_bin: Path, tmp_path: Path
) -> None:
    alerts = {r["alert"]: r for group in rules for r in group["rules"]}
    assert sorted(alerts) == sorted(CASES)
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump({"groups": rules}))
    tests = []
    for name, cases in CASES.items():
        for _case, inputs, at, labels in cases:
            expected = (
                []
                if labels is None
                else [{"exp_labels": labels, "exp_annotations": expand(alerts[name], labels)}]
            )
            tests.append(
                {
                    "interval": "1m",
                    "input_series": inputs,
                    "alert_rule_test": [
                        {"eval_time": at, "alertname": name, "exp_alerts": expected}
                    ],
                }
            )
    (tmp_path / "alerts.test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["alerts.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    promtool = monitoring_bin / "promtool"
    for args, timeout in [
        (["check", "rules", "alerts.yaml"], 120),
        (["test", "rules", "alerts.test.yaml"], 300),
    ]:
        out = run_captured([promtool, *args], timeout=timeout, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
    assert sum(len(c) for c in CASES.values()) == len(tests)


def test_alerts__promtool_fails_a_case_that_expects_the_wrong_thing(
    rules: list[dict[str, Any]], monitoring_bin: Path, tmp_path: Path
) -> None:
    """The harness can fail: a quiet case said to fire is refused."""
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump({"groups": rules}))
    _, inputs, at, _ = CASES["RecallApiThrottled"][1]
    test = {
        "interval": "1m",
        "input_series": inputs,
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": "RecallApiThrottled",
                "exp_alerts": [{"exp_labels": {"severity": "warning"}}],
            }
        ],
    }
    (tmp_path / "wrong.test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["alerts.yaml"], "tests": [test]})
    )
    run = subprocess.run(
        [str(monitoring_bin / "promtool"), "test", "rules", "wrong.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "RecallApiThrottled" in run.stdout + run.stderr


def test_alerts__name_only_exported_metrics_and_link_to_their_runbook(
    rules: list[dict[str, Any]],
) -> None:
    names = exported()
    anchors = _anchors(ROOT / "docs" / "operations.md")
    for rule in (r for group in rules for r in group["rules"]):
        used = set(re.findall(r"\brecall_[a-z_]+", rule["expr"]))
        assert used and used <= names, (rule["alert"], used - names)
        url = rule["annotations"]["runbook_url"]
        assert url == f"{operations_page()}#{rule['alert'].lower()}"
        assert rule["alert"].lower() in anchors, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")


def operations_page() -> str:
    """Where the docs site (`site_url` of mkdocs.yml) serves docs/operations.md."""
    site = str(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_url"])
    assert re.match(r"https://[^/]+/", site), site
    return urljoin(site, "operations/")


def test_alerts__a_relative_runbook_url_is_refused() -> None:
    with pytest.raises(subprocess.CalledProcessError) as e:
        render({"metrics.prometheusRule.enabled": "true",
                "metrics.prometheusRule.runbookUrl": "docs/operations.md"})  # fmt: skip
    assert "runbookUrl" in e.value.stderr


def test_alerts__runbook_base_and_alert_labels_from_values() -> None:
    docs = render(
        {
            "metrics.prometheusRule.enabled": "true",
            "metrics.prometheusRule.runbookUrl": "https://docs.example.org/recall/operations/",
            "metrics.prometheusRule.alertLabels.team": "media",
        }
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    for r in rule["spec"]["groups"][0]["rules"]:
        assert (
            r["annotations"]["runbook_url"]
            == f"https://docs.example.org/recall/operations/#{r['alert'].lower()}"
        )
        assert r["labels"]["team"] == "media"
    assert not [d for d in render({}) if d["kind"] in ("PrometheusRule", "ConfigMap")]


def _lint(
    monitoring_bin: Path, dashboard: Path, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    names = tmp_path / "metrics.txt"
    names.write_text("\n".join(sorted(exported())) + "\n")
    return subprocess.run(
        [str(monitoring_bin / "dashboardlint"), "-metrics", str(names), str(dashboard)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_dashboard__passes_the_linter(monitoring_bin: Path, tmp_path: Path) -> None:
    out = _lint(monitoring_bin, DASHBOARD, tmp_path)
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr
    titles = [p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]]
    for topic in ("Batch progress", "Throughput", "Leases", "Reclaims", "Store latency"):
        assert any(t.startswith(topic) for t in titles), topic


def test_dashboard__the_linter_refuses_a_broken_copy(monitoring_bin: Path, tmp_path: Path) -> None:
    broken = json.loads(DASHBOARD.read_text())
    panels = broken["panels"]
    panels[0]["targets"][0]["expr"] = 'max(recall_jobz{namespace="$namespace"})'
    panels[1]["targets"][0]["expr"] = "sum(rate(recall_worker_jobs_total[5m]))"
    del panels[2]["fieldConfig"]["defaults"]["unit"]
    panels[3]["datasource"] = {"type": "prometheus", "uid": "prometheus"}
    panels[4]["targets"][0]["expr"] = "sum(rate(recall_reclaims_total[$__rate_interval])"
    panels[5]["unknownField"] = True
    copy = tmp_path / "broken.json"
    copy.write_text(json.dumps(broken))
    out = _lint(monitoring_bin, copy, tmp_path)
    assert out.returncode == 1
    for rule in (
        "target-metrics-rule: no metric recall_jobz exists",
        "target-rate-interval-rule",
        "panel-units-rule",
        "panel-datasource-rule",
        "target-promql-rule",
        "unexpected field 'unknownField'",
    ):
        assert rule in out.stdout, (rule, out.stdout)


def test_dashboard__configmap_for_the_grafana_sidecar_carries_the_file() -> None:
    docs = render({"metrics.grafanaDashboard.enabled": "true"})
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
    ]
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config["data"]["recall.json"]) == json.loads(DASHBOARD.read_text())
