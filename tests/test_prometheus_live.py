"""A real Prometheus (Debian's) scrapes a running streaming job, lookup and collector on
loopback, with the shipped alert rules, while a small fleet goes through a fault: broker group
`broker-b` stops heartbeating and expires, and topic `OnlyOnB`, whose every queue it held,
loses its writable queues. Through Prometheus's HTTP API: every process's series are there,
RoutelakeTopicsWithoutWritableQueue fires for the cluster and resolves once broker-b is back,
and every query of the Grafana dashboard (deploy/grafana) returns data.

Prometheus loads the shipped rules file with one change: the alert under test holds for
LIVE_FOR_S instead of its shipped `for: 1m`, so that the test does not wait a minute for a
duration Prometheus itself keeps. The shipped `for` is covered where it can be without waiting:
the rules' promtool unit test (deploy/prometheus/tests: pending at 1m, firing at 2m). The
expression, labels and annotations are the shipped ones.

Cost: one `routectl run` (Spark local, a JVM; batches every 2 s over a handful of events), two
small Python services, Prometheus scraping every second; about a minute of wall time on a quiet
machine, most of it the job's start, at roughly half a core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from routelake_dev.broker_requests import register_request, topic_config
from tests.support.job_commands import run_args
from tests.support.process_support import free_port
from tests.support.prometheus_support import PROMETHEUS_DIR, tool
from tests.support.rocketmq_support import BrokerConnection, call

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "routelake.json"
ALERT = "RoutelakeTopicsWithoutWritableQueue"
CLUSTER = "cluster-1"
HEARTBEAT_TIMEOUT_MS = 6000
# The alert's `for` in the live run (shipped: 1m, tested by promtool): a few 1 s evaluations
# of a true expression, so pending -> firing is still Prometheus's own transition.
LIVE_FOR_S = 5


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


class Process:
    """A child process logging to a file, ended (by its own pid) on the way out."""

    def __init__(self, name: str, args: list[str], folder: Path, **env: str) -> None:
        self.log = folder / f"{name}.log"
        with open(self.log, "wb") as out:
            self.popen = subprocess.Popen(
                args,
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def alive(self) -> bool:
        assert self.popen.poll() is None, f"{self.log.name} exited:\n{self.tail()}"
        return True

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def routectl(*args: str) -> list[str]:
    return [sys.executable, "-m", "routing_lib.cli", *args]


class Fleet:
    """Two broker groups of one cluster registering every second through the collector, each
    with a heartbeat timeout of HEARTBEAT_TIMEOUT_MS; `Shared` is on both, `OnlyOnB` on b."""

    def __init__(self, collector_port: int) -> None:
        self.port = collector_port
        self.paused: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.brokers = {
            "broker-a": ("127.0.0.1:30911", {"Shared": topic_config("Shared", 4)}),
            "broker-b": (
                "127.0.0.1:30921",
                {"Shared": topic_config("Shared", 4), "OnlyOnB": topic_config("OnlyOnB", 4)},
            ),
        }

    def _run(self) -> None:
        # each broker's own connection, kept open as a broker keeps it: a connection's close
        # removes its broker (contract "Connections")
        connections: dict[str, BrokerConnection] = {}
        while not self.stop.is_set():
            for name, (addr, topics) in self.brokers.items():
                if name in self.paused:
                    continue
                request = register_request(
                    CLUSTER,
                    name,
                    addr,
                    topics=topics,
                    extra={"heartbeatTimeoutMillis": str(HEARTBEAT_TIMEOUT_MS)},
                )
                try:
                    if name not in connections:
                        connections[name] = BrokerConnection(self.port, timeout=10)
                    connections[name].call(request)
                except OSError:  # the collector is starting or stopping: next round
                    if (broken := connections.pop(name, None)) is not None:
                        broken.close()
            self.stop.wait(1.0)
        for sock in connections.values():
            sock.close()

    def __enter__(self) -> Fleet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


class PrometheusApi:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.get("query", query=expr)["result"]

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.get("alerts")["alerts"] if a["labels"]["alertname"] == name]

    def ready(self) -> bool:
        try:
            self.get("status/runtimeinfo")
        except OSError:
            return False
        return True


@pytest.fixture
def stack(tmp_path: Path, kafka_bootstrap: str, topic: str) -> Iterator[dict[str, Any]]:
    prometheus_bin = tool("prometheus")
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
    ports = {name: free_port() for name in ("job", "lookup", "remoting", "collector", "http", "p")}
    started: list[Process] = []
    try:
        started.append(
            Process(
                "job",
                routectl(
                    *run_args(
                        kafka_bootstrap,
                        topic,
                        warehouse,
                        checkpoint,
                        "--trigger-interval",
                        "2 seconds",
                        "--metrics-port",
                        str(ports["job"]),
                    )
                ),
                tmp_path,
                PYSPARK_PYTHON=sys.executable,
                ROUTELAKE_DRIVER_MEMORY="1g",
                ROUTELAKE_ROUTES_WATERMARK_DELAY_MS="2000",
            )
        )
        started.append(
            Process(
                "collector",
                routectl(
                    "collect",
                    "--port",
                    str(ports["collector"]),
                    "--kafka",
                    kafka_bootstrap,
                    "--topic",
                    topic,
                ),
                tmp_path,
                ROUTELAKE_COLLECTOR_HTTP_PORT=str(ports["http"]),
            )
        )
        started.append(
            Process(
                "lookup",
                routectl(
                    "serve",
                    "--warehouse",
                    str(warehouse),
                    "--port",
                    str(ports["remoting"]),
                    "--http-port",
                    str(ports["lookup"]),
                    "--workers",
                    "1",
                ),
                tmp_path,
            )
        )
        targets = {
            "routelake-route-state": ports["job"],
            "routelake-lookup": ports["lookup"],
            "routelake-collector": ports["http"],
        }
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_with_short_for(tmp_path))],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                for job, port in targets.items()
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        started.append(
            Process(
                "prometheus",
                [
                    prometheus_bin,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
                    f"--web.listen-address=127.0.0.1:{ports['p']}",
                ],
                tmp_path,
            )
        )
        api = PrometheusApi(ports["p"])
        wait_for(api.ready, 60, "Prometheus to start")
        yield {"api": api, "ports": ports, "processes": started, "topic": topic}
    finally:
        for process in reversed(started):
            process.stop()


def rules_with_short_for(folder: Path) -> Path:
    """The shipped rules file, written to `folder` with ALERT's `for` set to LIVE_FOR_S."""
    rules = yaml.safe_load((PROMETHEUS_DIR / "routelake-alerts.yml").read_text())
    matching = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == ALERT]
    assert len(matching) == 1 and matching[0]["for"] == "1m", matching  # what promtool tests
    matching[0]["for"] = f"{LIVE_FOR_S}s"
    written = folder / "routelake-alerts.yml"
    written.write_text(yaml.safe_dump(rules, sort_keys=False))
    return written


def alive(stack: dict[str, Any]) -> bool:
    return all(p.alive() for p in stack["processes"])


def value(api: PrometheusApi, expr: str) -> float | None:
    result = api.query(expr)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_sees_a_broker_group_expire_and_the_alert_fire_and_resolve(
    stack, kafka_bootstrap
):
    api: PrometheusApi = stack["api"]
    ports = stack["ports"]
    with Fleet(ports["collector"]) as fleet:
        wait_for(
            lambda: alive(stack) and value(api, 'count(up{job=~"routelake-.*"} == 1)') == 3,
            180,
            "Prometheus to scrape the job, the lookup and the collector",
        )
        wait_for(
            lambda: (
                alive(stack)
                and value(api, f'routelake_routes_live_brokers{{cluster="{CLUSTER}"}}') == 2
            ),
            300,
            "both broker groups live in the lookup's snapshot",
        )
        # one malformed record and a few lookups, so that every dashboard panel has data
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
        producer.send(stack["topic"], b"{not json").get(timeout=30)
        producer.close()
        # a broker of another cluster that registers once and hangs up: a connection's end
        probe = register_request("probe-cluster", "broker-probe", "127.0.0.1:30931")
        call(ports["collector"], probe)
        for topic in ("Shared", "NoSuchTopic"):
            url = f"http://127.0.0.1:{ports['lookup']}/topics/{topic}/route"
            try:
                urllib.request.urlopen(url, timeout=10).read()
            except urllib.error.HTTPError:
                pass  # the 404 of the unknown topic is counted as not_found

        series = {
            "routelake_job_batches_total": "routelake-route-state",
            "routelake_job_watermark_lag_seconds": "routelake-route-state",
            "routelake_job_kafka_up": "routelake-route-state",
            "routelake_lookup_requests_total": "routelake-lookup",
            "routelake_lookup_snapshot_watermark_age_seconds": "routelake-lookup",
            "routelake_routes_topics_single_broker_group": "routelake-lookup",
            "routelake_collector_published_total": "routelake-collector",
            "routelake_collector_publish_duration_seconds_count": "routelake-collector",
        }
        # Each process is scraped on its own second: the lookup can show both groups live a
        # scrape before the job's watermark series is in (the side lane's load made it miss
        # once), so each series gets a few scrapes to appear.
        for name, job in series.items():
            query = f'{name}{{job="{job}"}}'
            wait_for(lambda query=query: bool(api.query(query)), 30, f"{query} to be scraped")
        unwritable = f'routelake_routes_topics_without_writable_queue{{cluster="{CLUSTER}"}}'
        assert value(api, unwritable) == 0
        assert value(api, "routelake_job_kafka_up") == 1
        assert not api.alerts(ALERT)

        # The fault: broker-b stops heartbeating, expires, and OnlyOnB goes with it.
        fleet.paused.add("broker-b")
        wait_for(
            lambda: (
                alive(stack)
                and value(api, f'routelake_routes_live_brokers{{cluster="{CLUSTER}"}}') == 1
            ),
            120,
            "broker-b to expire",
        )
        # The job counts the expiry once its batch's progress row is in, which is also when
        # the lookup may load the snapshot: the two are scraped apart, so wait a few scrapes.
        expiries = f'routelake_job_broker_expiries_total{{cluster="{CLUSTER}",broker="broker-b"}}'
        wait_for(
            lambda: alive(stack) and (value(api, expiries) or 0) >= 1,
            30,
            "the job's scraped expiry counter of broker-b",
        )
        assert value(api, unwritable) == 1
        firing = wait_for(
            lambda: alive(stack) and [a for a in api.alerts(ALERT) if a["state"] == "firing"],
            150,
            f"{ALERT} to fire",
        )
        assert firing[0]["labels"]["cluster"] == CLUSTER
        assert firing[0]["labels"]["severity"] == "critical"

        # broker-b comes back with its topics: the alert resolves.
        fleet.paused.discard("broker-b")
        wait_for(lambda: alive(stack) and not api.alerts(ALERT), 120, f"{ALERT} to resolve")
        assert value(api, unwritable) == 0

        # Every query of the dashboard answers with data.
        dashboard = json.loads(DASHBOARD.read_text())
        empty = []
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                if not api.query(target["expr"]):
                    empty.append((panel["title"], target["expr"]))
        assert not empty
