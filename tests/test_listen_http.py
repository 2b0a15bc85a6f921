"""What the deployment manifests rely on, on real processes: `routectl collect` with
[collector] http_port serves /healthz, /readyz (200 only while Kafka acknowledges its TICKs)
and /metrics; [serve] host decides which address the listeners bind (a pod needs 0.0.0.0): the
collector's, the lookup's and the job's /metrics server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.metrics_support import sample

COLLECT_PORT, COLLECT_HTTP = 29805, 29806
AWAY_PORT, AWAY_HTTP = 29808, 29809
NO_KAFKA = 29807  # nothing listens here
LOOKUP_PORT, LOOKUP_HTTP = 29810, 29811
JOB_METRICS = 29812
# Linux routes all of 127/8 to loopback: a socket bound to 127.0.0.1 refuses 127.0.0.2,
# one bound to 0.0.0.0 accepts it.
OTHER_LOCAL_ADDRESS = "127.0.0.2"


def get(host: str, port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_until(check, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


@contextmanager
def routectl(*args: str, **env: str) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(
        [sys.executable, "-m", "routing_lib.cli", *args],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=40)
        assert process.returncode == 0, stderr[-2000:]


def refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.kafka
def test_collector_http_ready_while_kafka_acknowledges(kafka_bootstrap, topic):
    with routectl(
        "collect",
        "--port",
        str(COLLECT_PORT),
        "--kafka",
        kafka_bootstrap,
        "--topic",
        topic,
        ROUTELAKE_COLLECTOR_HTTP_PORT=str(COLLECT_HTTP),
        ROUTELAKE_COLLECTOR_TICK_INTERVAL_MS="200",
    ) as process:
        assert wait_until(lambda: get("127.0.0.1", COLLECT_HTTP, "/healthz")[0] == 200)
        assert wait_until(lambda: get("127.0.0.1", COLLECT_HTTP, "/readyz")[0] == 200)
        assert get("127.0.0.1", COLLECT_HTTP, "/readyz")[1] == '{"ready":true}'
        status, metrics = get("127.0.0.1", COLLECT_HTTP, "/metrics")
        assert status == 200
        assert (sample(metrics, "routelake_collector_published_total", event="TICK") or 0) >= 1
        # The default [serve] host is loopback only.
        assert refused(OTHER_LOCAL_ADDRESS, COLLECT_HTTP) and refused(
            OTHER_LOCAL_ADDRESS, COLLECT_PORT
        )
        assert process.poll() is None


def test_collector_not_ready_without_kafka_and_bound_to_all_addresses():
    with routectl(
        "collect",
        "--port",
        str(AWAY_PORT),
        "--kafka",
        f"127.0.0.1:{NO_KAFKA}",
        "--topic",
        "nowhere",
        ROUTELAKE_COLLECTOR_HTTP_PORT=str(AWAY_HTTP),
        ROUTELAKE_COLLECTOR_TICK_INTERVAL_MS="200",
        ROUTELAKE_COLLECTOR_PUBLISH_TIMEOUT_MS="500",
        ROUTELAKE_SERVE_HOST="0.0.0.0",
    ):
        assert wait_until(lambda: get(OTHER_LOCAL_ADDRESS, AWAY_HTTP, "/healthz")[0] == 200)
        time.sleep(1.5)  # a few TICKs have failed by now
        status, body = get(OTHER_LOCAL_ADDRESS, AWAY_HTTP, "/readyz")
        assert status == 503 and "not acknowledged by Kafka" in body
        _, metrics = get(OTHER_LOCAL_ADDRESS, AWAY_HTTP, "/metrics")
        assert sample(metrics, "routelake_collector_publish_failures_total", event="TICK")
        assert sample(metrics, "routelake_collector_kafka_up") == 0
        socket.create_connection((OTHER_LOCAL_ADDRESS, AWAY_PORT), timeout=2).close()


def test_lookup_binds_serve_host(tmp_path):
    with routectl(
        "serve",
        "--warehouse",
        str(tmp_path / "empty"),
        "--port",
        str(LOOKUP_PORT),
        "--http-port",
        str(LOOKUP_HTTP),
        ROUTELAKE_SERVE_HOST="0.0.0.0",
    ):
        assert wait_until(lambda: get(OTHER_LOCAL_ADDRESS, LOOKUP_HTTP, "/healthz")[0] == 200)
        # No snapshot yet: alive but not ready (the lookup Deployment's readiness probe).
        assert get(OTHER_LOCAL_ADDRESS, LOOKUP_HTTP, "/readyz")[0] == 503
        socket.create_connection((OTHER_LOCAL_ADDRESS, LOOKUP_PORT), timeout=2).close()


def test_job_metrics_bind_the_given_host():
    from routing_lib.metrics import JobMetrics, serve_metrics

    for host, other_reachable in (("127.0.0.1", False), ("0.0.0.0", True)):
        server = serve_metrics(JobMetrics(), JOB_METRICS, host)
        try:
            assert get("127.0.0.1", JOB_METRICS, "/metrics")[0] == 200
            assert refused(OTHER_LOCAL_ADDRESS, JOB_METRICS) is not other_reachable
        finally:
            server.shutdown()
            server.server_close()
