"""The streaming job's metrics, in a prometheus_client registry served on GET /metrics."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from routing_lib.metrics_http import start_metrics_server

# No `_created` series: nobody alerts on them, and they double the exposition.
disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated in prometheus_client

# Gauges set from outside the batch callback (Spark's progress listener, ...): name -> help.
JOB_GAUGES: dict[str, str] = {
    "routelake_job_state_rows": "Rows in Spark's state store (broker groups held).",
    "routelake_job_kafka_lag_messages": (
        "Kafka records not read yet: the largest maxOffsetsBehindLatest of the sources."
    ),
    "routelake_job_content_files": (
        "Files in the checkpoint's content store after its last collection."
    ),
    "routelake_job_content_bytes": (
        "Bytes in the checkpoint's content store after its last collection."
    ),
}
# Counts of a batch report -> the counter they add to (names without _total).
_COUNTS = {
    "input_rows": ("routelake_job_input_events", "Records read from the source."),
    "applied": ("routelake_job_processed_events", "Events applied to the route state."),
    "late": ("routelake_job_late_events", "Events older than the published watermark."),
    "changes": ("routelake_job_row_changes", "Route table row changes written."),
}
# Micro-batches take from well under a second (a few heartbeats) to a minute (a fleet's
# worth of registrations at 300 x 10 000).
BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# How old the published routes are when a batch publishes them: the watermark delay (seconds
# to a minute) plus the batch's own time.
FRESHNESS_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)

# Dead-letter reasons are free text (they quote the record): the metric's label is the kind
# of failure, from the text's beginning; the dead-letter table keeps the whole reason.
_REASON_KINDS = (
    ("not UTF-8", "not_utf8"),
    ("empty record", "empty"),
    ("not JSON", "not_json"),
    ("not a JSON object", "not_object"),
    ("internal error", "internal_error"),
)


def dead_letter_kind(reason: str) -> str:
    """The metric label of a dead-letter reason: not_utf8, empty, not_json, not_object,
    internal_error, future_event_time (ahead of the clock) or invalid_event (the rest: a
    field missing or out of range)."""
    for prefix, kind in _REASON_KINDS:
        if reason.startswith(prefix):
            return kind
    if "ms ahead of" in reason:
        return "future_event_time"
    return "invalid_event"


class JobMetrics:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self._batches = Counter("routelake_job_batches", "Micro-batches published.", registry=reg)
        self._counts = {
            key: Counter(name, help_text, registry=reg)
            for key, (name, help_text) in _COUNTS.items()
        }
        self._expiries = Counter(
            "routelake_job_broker_expiries",
            "Brokers expired by the event-time clock (EXPIRED rows of broker_liveness_events), "
            "by cluster and broker name.",
            ["cluster", "broker"],
            registry=reg,
        )
        self._dead = Counter(
            "routelake_job_dead_letters",
            "Records sent to the dead-letter table, by kind of reason.",
            ["reason"],
            registry=reg,
        )
        self._batch_seconds = Histogram(
            "routelake_job_batch_duration_seconds",
            "Wall time of a micro-batch, from its start to its progress row.",
            buckets=BATCH_BUCKETS,
            registry=reg,
        )
        self._phase_seconds = Histogram(
            "routelake_job_batch_phase_duration_seconds",
            "Wall time of a micro-batch's phases: step (the stateful plan), tables (the "
            "route and history commits), progress (the progress row).",
            ["phase"],
            buckets=BATCH_BUCKETS,
            registry=reg,
        )
        self._freshness = Histogram(
            "routelake_job_freshness_seconds",
            "At each publication: wall clock minus the event-time watermark published.",
            buckets=FRESHNESS_BUCKETS,
            registry=reg,
        )
        self._gauges = {name: Gauge(name, text, registry=reg) for name, text in JOB_GAUGES.items()}
        self._kafka_up = Gauge(
            "routelake_job_kafka_up",
            "1 while a bootstrap server of the job's Kafka accepts connections, 0 while none "
            "does (the job then waits: [kafka] outage_timeout_s).",
            registry=reg,
        )
        self._lock = threading.Lock()
        self._watermark: int | None = None
        self._published_at: float | None = None
        reg.register(_Published(self))

    def record_batch(
        self,
        watermark: int,
        counts: Mapping[str, int],
        seconds: float,
        phases: Mapping[str, float] | None = None,
        dead_letter_reasons: Mapping[str, int] | None = None,
        broker_expiries: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        """A published micro-batch: its watermark, counts, time and phases, its dead
        letters' reasons (reason text -> records) and its broker expiries ((cluster, broker
        name) -> EXPIRED rows written; None when the job writes no history)."""
        now = self.clock()
        self._batches.inc()
        for key, counter in self._counts.items():
            counter.inc(counts.get(key, 0))
        self._count_dead_letters(counts, dead_letter_reasons or {})
        if broker_expiries is None:
            # no history rows to name the brokers: the count alone, without cluster or broker
            broker_expiries = {("", ""): counts.get("expired", 0)}
        for (cluster, broker), n in broker_expiries.items():
            if n:
                self._expiries.labels(cluster, broker).inc(n)
        self._batch_seconds.observe(seconds)
        for phase, spent in (phases or {}).items():
            self._phase_seconds.labels(phase).observe(spent)
        if watermark > 0:
            # Watermark 0 is "no event yet" (batch 0 of a fresh checkpoint), not 1970: its
            # freshness would be ~1.76e9 s, kept in the histogram's _sum for the process's life.
            self._freshness.observe(max(0.0, now - watermark / 1000))
        with self._lock:
            if watermark > 0:
                self._watermark = watermark
            self._published_at = now

    def _count_dead_letters(self, counts: Mapping[str, int], reasons: Mapping[str, int]) -> None:
        """Dead letters by kind of reason. The table gets the records that failed on arrival
        (`dead_lettered`) and the events that failed in the step (`failed_in_step`); the writer
        reads every reason, so a record without one is a bug: counted as `unknown`, not hidden
        among the invalid events."""
        kinds: dict[str, int] = {}
        for reason, n in reasons.items():
            kind = dead_letter_kind(reason)
            kinds[kind] = kinds.get(kind, 0) + n
        written = counts.get("dead_lettered", 0) + counts.get("failed_in_step", 0)
        unread = written - sum(kinds.values())
        if unread > 0:
            kinds["unknown"] = kinds.get("unknown", 0) + unread
        for kind, n in kinds.items():
            self._dead.labels(kind).inc(n)

    def set(self, name: str, value: float) -> None:
        self._gauges[name].set(value)

    def set_kafka_up(self, up: bool) -> None:
        self._kafka_up.set(int(up))

    def get(self, name: str, **labels: str) -> float:
        """A sample's value: `routelake_job_batches_total`, a gauge, ... A sample that is not
        exposed raises KeyError: an absent series is not a zero (`has` tells them apart)."""
        value = self.registry.get_sample_value(name, labels)
        if value is None:
            raise KeyError(f"no sample {name}{labels or ''} in the job's metrics")
        return value

    def has(self, name: str, **labels: str) -> bool:
        """Whether the sample is exposed (a labelled series exists once it was incremented)."""
        return self.registry.get_sample_value(name, labels) is not None

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Published:
    """The published watermark and how far behind the wall clock it is, now (a scrape
    between batches sees the lag grow)."""

    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        m = self.metrics
        with m._lock:
            watermark, published_at = m._watermark, m._published_at
        if published_at is not None:
            yield GaugeMetricFamily(
                "routelake_job_last_batch_timestamp_seconds",
                "When the latest micro-batch was published (Unix time).",
                value=published_at,
            )
        if watermark is None:  # no batch yet, or none past the first event: nothing to age
            return
        yield GaugeMetricFamily(
            "routelake_job_watermark_timestamp_seconds",
            "Event-time watermark of the published tables (Unix time).",
            value=watermark / 1000,
        )
        yield GaugeMetricFamily(
            "routelake_job_watermark_lag_seconds",
            "Wall clock minus the published watermark: how far behind the routes are.",
            value=m.clock() - watermark / 1000,
        )


class KafkaProbe:
    """Whether the job's Kafka is reachable: a TCP connection to a bootstrap server every
    `interval_s` (Spark says nothing while it waits out an outage)."""

    def __init__(
        self, bootstrap_servers: str, metrics: JobMetrics, interval_s: float = 5.0
    ) -> None:
        self.addresses = [_host_port(s) for s in bootstrap_servers.split(",") if s.strip()]
        self.metrics = metrics
        self.interval_s = interval_s
        self.stop = threading.Event()

    def reachable(self) -> bool:
        for host, port in self.addresses:
            try:
                with socket.create_connection((host, port), timeout=min(2.0, self.interval_s)):
                    return True
            except OSError:
                continue
        return False

    def start(self) -> KafkaProbe:
        threading.Thread(target=self._run, daemon=True, name="kafka-probe").start()
        return self

    def _run(self) -> None:
        while not self.stop.is_set():
            self.metrics.set_kafka_up(self.reachable())
            self.stop.wait(self.interval_s)


KAFKA_DEFAULT_PORT = 9092


def _host_port(server: str) -> tuple[str, int]:
    """A bootstrap server's (host, port): `host:port`, `[v6]:port`, or a bare host or `[v6]`
    on Kafka's default port."""
    server = server.strip()
    host, colon, port = server.rpartition(":")
    bare_ipv6 = ":" in host and not host.endswith("]")  # "::1": the colons are the address's
    if not colon or bare_ipv6 or server.endswith("]"):  # "kafka", "::1", "[::1]": no port
        return server.strip("[]") or "localhost", KAFKA_DEFAULT_PORT
    return host.strip("[]") or "localhost", int(port or KAFKA_DEFAULT_PORT)


def serve_metrics(metrics: JobMetrics, port: int, host: str = "127.0.0.1") -> WSGIServer:
    """GET /metrics on host:port ([serve] host), in a daemon thread (prometheus_client's
    server, as every routelake process serves its metrics: metrics_http.py)."""
    return start_metrics_server(metrics.registry, port, host)
