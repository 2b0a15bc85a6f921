"""promtool on what routelake ships: the job's, the lookup's and the collector's expositions
(`promtool check metrics`: names, units, types by Prometheus conventions), the alert rules
(`promtool check rules`) and their unit tests (`promtool test rules`)."""

from __future__ import annotations

import json
import re

import yaml
from prometheus_client.parser import text_string_to_metric_families

from routing_lib.collector.service import CollectorMetrics
from routing_lib.lookup.route_risk import RouteRisks
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.workers import Workers
from routing_lib.metrics import JOB_GAUGES, JobMetrics
from routing_lib.remoting.service_metrics import Metrics
from tests.support.lookup_support import snapshot
from tests.support.metrics_support import sample
from tests.support.prometheus_support import PROMETHEUS_DIR, promtool

RULES = PROMETHEUS_DIR / "routelake-alerts.yml"
RULE_TESTS = sorted((PROMETHEUS_DIR / "tests").glob("*.yml"))


def assert_clean(exposition: bytes) -> None:
    checked = promtool("check", "metrics", stdin=exposition)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


def job_exposition() -> bytes:
    metrics = JobMetrics()
    counts = {"input_rows": 9, "applied": 7, "late": 1, "expired": 1, "dead_lettered": 1}
    phases = {"step": 0.8, "tables": 0.3, "progress": 0.01}
    expiries = {("cluster-a", "broker-b"): 1}
    metrics.record_batch(1_764_000_000_000, counts, 1.2, phases, {"not JSON: x": 1}, expiries)
    metrics.set("routelake_job_state_rows", 12)
    metrics.set_kafka_up(True)
    return metrics.exposition()


def lookup_metrics(clock: float = 1_764_000_070.0) -> Metrics:
    metrics = Metrics(max_watermark_age_s=60, clock=lambda: clock)
    metrics.observe("remoting", "105", "0", 0.0004)
    metrics.observe("remoting", "105", "17", 0.0002)
    metrics.observe("http", "/topics/{topic}/route", "200", 0.002)
    metrics.observe_build("full", 0.4)
    metrics.observe_build("incremental", 0.02)
    metrics.refreshed("swapped")
    metrics.frame_error("MalformedFrameError")
    metrics.reject("remoting", "max_connections")
    metrics.connection_opened()
    metrics.readyz_stale()
    return metrics


def test_the_job_exposition_passes_promtool():
    assert_clean(job_exposition())


def lookup_with_everything(tmp_path) -> Metrics:
    """A lookup's metrics with a snapshot served, its route gauges, a worker slot
    (`--workers 2`) and the collector's counters (`serve --collect`) joined in."""
    metrics = lookup_metrics()
    index = RouteIndex(snapshot())
    metrics.snapshot_source = lambda: (index, 1_764_000_060.0)
    risks = RouteRisks()
    metrics.register(lambda: risks.families(index))
    Workers(1, tmp_path).report_to(metrics)
    collector = CollectorMetrics()
    collector.acknowledged("REGISTER", 0.004)
    collector.not_acknowledged("HEARTBEAT", 5.0)
    collector.kafka_up.set(1)
    metrics.register(collector.registry.collect)
    return metrics


def test_the_lookup_exposition_passes_promtool(tmp_path):
    text = lookup_with_everything(tmp_path).exposition()
    assert_clean(text)

    decoded = text.decode()
    requests = "routelake_lookup_requests_total"
    assert sample(decoded, requests, request="105", code="0", result="ok") == 1
    assert sample(decoded, requests, request="105", code="17", result="not_found") == 1
    assert sample(decoded, "routelake_lookup_request_duration_seconds_count") == 3
    assert sample(decoded, "routelake_lookup_snapshot_build_duration_seconds_count") == 2
    assert sample(decoded, "routelake_lookup_connections") == 1
    assert sample(decoded, "routelake_lookup_workers", state="loading") == 1
    assert sample(decoded, "routelake_lookup_worker_exits_total") == 0
    assert sample(decoded, "routelake_lookup_snapshot_age_seconds") == 10
    assert sample(decoded, "routelake_lookup_snapshot_watermark_timestamp_seconds") == (
        1_764_000_050
    )
    unwritable = "routelake_routes_topics_without_writable_queue"
    assert sample(decoded, unwritable, cluster="ClusterB") == 2
    assert sample(decoded, "routelake_collector_published_total", event="REGISTER") == 1
    assert sample(decoded, "process_resident_memory_bytes")


def test_the_collector_exposition_passes_promtool():
    metrics = Metrics(prefix="routelake_collector")
    metrics.observe("remoting", "103", "0", 0.003)
    collector = CollectorMetrics()
    collector.acknowledged("TICK", 0.002)
    collector.refuse(103)
    collector.deny(327)
    collector.tick_skipped()
    metrics.register(collector.registry.collect)
    text = metrics.exposition()
    assert_clean(text)
    assert sample(text.decode(), "routelake_collector_requests_total", code="0") == 1


def test_the_alert_rules_pass_promtool_check():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_alert_rules_pass_their_unit_tests():
    assert RULE_TESTS
    for path in RULE_TESTS:
        tested = promtool("test", "rules", str(path))
        assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test_that_fires_it():
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    fired = {
        case["alertname"]
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert alerts == fired


def annotated_pods() -> dict[str, dict]:
    """name label -> annotations of every pod template in deploy/k8s that asks to be scraped
    (Deployments' templates, the SparkApplication's driver)."""
    pods = {}
    for path in sorted((PROMETHEUS_DIR.parent / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            spec = doc.get("spec", {})
            templates = [spec.get("template", {}).get("metadata", {}), spec.get("driver", {})]
            for meta in templates:
                annotations = meta.get("annotations") or {}
                if annotations.get("prometheus.io/scrape") == "true":
                    pods[meta["labels"]["app.kubernetes.io/name"]] = annotations
    return pods


def test_the_scrape_config_keeps_the_job_the_lookup_and_the_collector(tmp_path):
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    keep = {
        tuple(r["source_labels"]): r["regex"]
        for r in job["relabel_configs"]
        if r.get("action") == "keep"
    }
    name_regex = keep[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)]
    pods = annotated_pods()
    assert set(pods) == {"routelake-route-state", "routelake-lookup", "routelake-collector"}
    for name in pods:  # Prometheus anchors its regexes
        assert re.fullmatch(name_regex, name), name
    assert not re.fullmatch(name_regex, "routelake-spark")
    assert keep[("__meta_kubernetes_pod_annotation_prometheus_io_scrape",)] == "true"
    assert config["rule_files"] == ["routelake-alerts.yml"]
    # Debian's Prometheus is built without Kubernetes discovery: promtool checks the rest
    # (relabelling, rule files) with the pods given statically instead.
    del job["kubernetes_sd_configs"]
    job["static_configs"] = [{"targets": ["127.0.0.1:9100"]}]
    config["rule_files"] = [str(RULES)]
    checked_path = tmp_path / "prometheus.yml"
    checked_path.write_text(yaml.safe_dump(config))
    checked = promtool("check", "config", str(checked_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def families(exposition: bytes) -> dict[str, str]:
    """Family name (as the parser gives it: a counter's without `_total`) -> type."""
    return {f.name: f.type for f in text_string_to_metric_families(exposition.decode())}


def every_family(tmp_path) -> dict[str, str]:
    """The routelake families of the job's, the lookup's and the collector's expositions."""
    job = JobMetrics()
    for name in JOB_GAUGES:
        job.set(name, 1)
    collector = Metrics(prefix="routelake_collector", clock=lambda: 1_764_000_070.0)
    index = RouteIndex(snapshot())
    collector.snapshot_source = lambda: (index, 1_764_000_060.0)
    collector.observe_build("full", 0.4)
    collector.refreshed("swapped")
    collector.register(CollectorMetrics().registry.collect)
    found = {
        **families(job_exposition()),
        **families(job.exposition()),
        **families(lookup_with_everything(tmp_path).exposition()),
        **families(collector.exposition()),
    }
    return {name: kind for name, kind in found.items() if name.startswith("routelake_")}


def documented_name(name: str, kind: str) -> str:
    """How the operations doc names a family: a counter by its sample, `_total`."""
    return f"{name}_total" if kind == "counter" else name


def series_names(found: dict[str, str]) -> set[str]:
    """The names a query can select: a counter's `_total`, a histogram's `_bucket`, `_sum`
    and `_count`, a gauge's own."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    return {name + suffix for name, kind in found.items() for suffix in suffixes.get(kind, ("",))}


def test_operations_doc_lists_every_metric_and_alert(tmp_path):
    doc = (PROMETHEUS_DIR.parents[1] / "docs" / "operations.md").read_text()
    # every backquoted metric name, but the section titles' prefixes (`routelake_job_*`)
    named = {n for n in re.findall(r"`(routelake_\w+)", doc) if not n.endswith("_")}
    exported = {documented_name(n, kind) for n, kind in every_family(tmp_path).items()}
    assert sorted(exported - named) == []  # exported, not documented
    assert sorted(named - exported) == []  # documented, not exported (or misspelt)
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert not sorted(a for a in alerts if f"`{a}`" not in doc)


def test_the_dashboard_and_the_alerts_query_only_series_the_processes_export(tmp_path):
    """Each panel queries the Prometheus data source variable, and every routelake series
    that a dashboard query or an alert expression names is one the processes export, by its
    exact name; tests/test_prometheus_live.py runs the queries against real scrapes."""
    dashboard = json.loads((PROMETHEUS_DIR.parent / "grafana" / "routelake.json").read_text())
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    exported = series_names(every_family(tmp_path))
    assert dashboard["panels"] and rules
    queries = [(rule["alert"], rule["expr"]) for rule in rules]
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        queries += [(panel["title"], target["expr"]) for target in panel["targets"]]
    for where, expr in queries:
        for name in re.findall(r"\broutelake_\w+", expr):
            assert name in exported, (where, name)
