"""The network services' metrics (the lookup's and the collector's), in a prometheus_client
registry: requests and rejections per listener, the served snapshot, and what other parts add
(the collector's counters, the lookup's route-risk and worker gauges) as collectors of the same
registry.

Several worker processes (`serve --workers`, lookup/workers.py) count in prometheus_client's
multiprocess mode: each process writes its values to files in PROMETHEUS_MULTIPROC_DIR, and
the primary's /metrics reads them all (MultiProcessCollector). Counters and histograms add up
over every process that ever ran, so a worker's death takes nothing away; the live gauges
(connections, memory: `livesum`) count the processes alive. The snapshot's gauges are the
primary's.
"""

from __future__ import annotations

import bisect
import glob
import math
import os
import resource
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

# A `_created` sample per counter means nothing once counts are summed over processes.
disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated in prometheus_client

# Where each process of `serve --workers` writes its values (prometheus_client's variable).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _observe_all(histogram: Histogram, values: list[float]) -> None:
    """Histogram.observe of each value, with its sum and each bucket written once. Uses the
    child's `_sum`, `_buckets` and `_upper_bounds` (what its own observe uses); a
    prometheus_client without them gets one observe per value."""
    try:
        bounds, buckets, total = histogram._upper_bounds, histogram._buckets, histogram._sum
    except AttributeError:
        for value in values:
            histogram.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1  # the first bound >= value (le)
    total.inc(math.fsum(values))
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)


class ServedIndex(Protocol):
    """What the metrics show of the served snapshot (the lookup's RouteIndex has it): the
    network layer names no lookup type, so it does not depend on the lookup."""

    @property
    def watermark(self) -> int | None: ...
    @property
    def versions(self) -> Mapping[str, int]: ...
    @property
    def route_count(self) -> int | None: ...


LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
# Snapshot builds: ms for a batch of heartbeats, tens of seconds for a full load at scale.
BUILD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Remoting answers the lookup gives when the thing asked for does not exist (TOPIC_NOT_EXIST,
# QUERY_NOT_FOUND): the client's question, not the service's failure.
NOT_FOUND_CODES = frozenset({"17", "22"})


def request_result(protocol: str, code: str) -> str:
    """ok / not_found / error: what a request's answer code means to an operator."""
    if protocol == "http":
        if code.startswith(("2", "3")):
            return "ok"
        return "not_found" if code == "404" else "error"
    if code == "0":
        return "ok"
    return "not_found" if code in NOT_FOUND_CODES else "error"


def resident_memory_bytes() -> float:
    """This process's resident set size (Linux: /proc/self/statm)."""
    try:
        with open("/proc/self/statm") as statm:
            return float(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):  # elsewhere: the peak, which is what we have
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def label_values(registry: CollectorRegistry, sample: str, *labels: str) -> dict[Any, float]:
    """{label values (a tuple, or the one value): sample value} of one sample name: what a
    test or a log line reads back of a labelled counter."""
    found: dict[Any, float] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == sample:
                key = tuple(s.labels[name] for name in labels)
                found[key[0] if len(key) == 1 else key] = s.value
    return found


class WorkerPool(Protocol):
    """The worker processes of `serve --workers` (lookup/workers.py), as the primary's
    /readyz and /metrics see them."""

    def loading(self) -> int:
        """Worker processes that cannot answer yet: starting, loading, or being replaced."""
        ...

    def families(self) -> Iterable[Metric]: ...


class _OwnProcess(Collector):
    """One process's counted metrics (no worker processes)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        self.metrics._memory.set(resident_memory_bytes())
        return self.metrics.counted.collect()


class _AllProcesses(Collector):
    """The counted metrics of every process that wrote to the multiprocess directory."""

    def __init__(self, metrics: Metrics, directory: str) -> None:
        self.metrics = metrics
        self.files = MultiProcessCollector(None, directory)  # type: ignore[no-untyped-call]  # unannotated in prometheus_client

    def collect(self) -> Iterable[Metric]:
        self.metrics._memory.set(resident_memory_bytes())
        internal = self.metrics.snapshot_loaded_name
        families = self.files.collect()  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
        return [f for f in families if f.name != internal]


class _Snapshot(Collector):
    """The served snapshot's gauges (`snapshot_source`, read at each scrape)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        m = self.metrics
        index, loaded_at = m.snapshot_source()
        now = m.clock()
        p = m.prefix
        yield _gauge(f"{p}_ready", "1 once a snapshot is loaded.", int(index is not None))
        if m.pool is not None:
            yield from m.pool.families()
        if m.last_build_seconds is not None:
            yield _gauge(
                f"{p}_snapshot_last_build_duration_seconds",
                "Time this process took to build the snapshot it serves.",
                m.last_build_seconds,
            )
        if index is None or loaded_at is None:
            return
        yield _gauge(
            f"{p}_snapshot_age_seconds",
            "Seconds since the served snapshot loaded.",
            now - loaded_at,
        )
        if index.watermark is not None:
            yield _gauge(
                f"{p}_snapshot_watermark_age_seconds",
                "Wall clock minus the served snapshot's event-time watermark.",
                now - index.watermark / 1000,
            )
            yield _gauge(
                f"{p}_snapshot_watermark_timestamp_seconds",
                "The served snapshot's event-time watermark (Unix time).",
                index.watermark / 1000,
            )
        if m.max_watermark_age_s > 0:
            stale = m.stale_watermark_age(index.watermark, now) is not None
            yield _gauge(
                f"{p}_watermark_stale",
                "1 while the watermark is older than [serve] max_watermark_age_s "
                "(then /readyz fails).",
                int(stale),
            )
        versions = GaugeMetricFamily(
            f"{p}_table_version", "Delta version of each table served.", labels=["table"]
        )
        for table, version in sorted(index.versions.items()):
            versions.add_metric([table], version)
        yield versions
        if index.route_count is not None:
            yield _gauge(
                f"{p}_snapshot_topics", "Topics with a route in the snapshot.", index.route_count
            )


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _no_snapshot() -> tuple[ServedIndex | None, float | None]:
    return None, None


class Metrics:
    def __init__(
        self,
        max_watermark_age_s: float = 0.0,
        prefix: str = "routelake_lookup",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_watermark_age_s = max_watermark_age_s  # 0: no staleness bound
        self.prefix = prefix
        self.clock = clock
        # The served snapshot and when it loaded, read at each scrape (the service sets it).
        self.snapshot_source: Callable[[], tuple[ServedIndex | None, float | None]] = _no_snapshot
        # Set by serve_workers before this process creates its metrics (workers.py).
        self.multiprocess_dir = os.environ.get(MULTIPROC_ENV) or None
        # What /metrics shows; other parts register their collectors here (the collector's
        # counters under `serve --collect`, the lookup's route gauges).
        self.registry = CollectorRegistry(auto_describe=True)
        # What this process counts (with worker processes: its share of the sums).
        self.counted = CollectorRegistry(auto_describe=True)
        p, reg = prefix, self.counted
        self._requests = Counter(
            f"{p}_requests",
            "Requests answered, by protocol, request, answer code and result "
            "(ok, not_found, error).",
            ["protocol", "request", "code", "result"],
            registry=reg,
        )
        self._latency = Histogram(
            f"{p}_request_duration_seconds",
            "Time to answer one request.",
            ["protocol"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self._refreshes = Counter(
            f"{p}_refreshes", "Snapshot refresh polls by result.", ["result"], registry=reg
        )
        self._builds = Histogram(
            f"{p}_snapshot_build_duration_seconds",
            "Time to build a new snapshot, by kind (incremental: the batch's changes applied "
            "to the last one; full: every table read again).",
            ["kind"],
            buckets=BUILD_BUCKETS,
            registry=reg,
        )
        self._frame_errors = Counter(
            f"{p}_frame_errors", "Connections closed on a bad frame.", ["reason"], registry=reg
        )
        self._rejections = Counter(
            f"{p}_rejections",
            "Connections closed or requests refused by a limit, by listener and reason.",
            ["listener", "reason"],
            registry=reg,
        )
        # Gauges of a dead worker process leave the sum with it (livesum).
        self._connections = Gauge(
            f"{p}_connections",
            "Open remoting connections.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self._memory = Gauge(
            f"{p}_resident_memory_bytes",
            "Resident memory of the service's processes (summed over worker processes).",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self._readyz_stale = Counter(
            f"{p}_readyz_stale", "/readyz answered 503: stale watermark.", registry=reg
        )
        # Which processes serve a snapshot: how the primary learns its workers are ready
        # (one sample per live process, by pid). Not exported: `ready` and `workers` say it.
        self.snapshot_loaded_name = f"{p}_process_snapshot_loaded"
        self.serving_snapshot = False
        self._snapshot_loaded = Gauge(
            self.snapshot_loaded_name,
            "1 once this process serves a snapshot.",
            registry=None,
            multiprocess_mode="liveall",
        )
        self.pool: WorkerPool | None = None
        self._observed: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self.last_refresh_error: str | None = None
        self.last_build_seconds: float | None = None
        if self.multiprocess_dir is None:
            self.registry.register(_OwnProcess(self))
        else:
            self.registry.register(_AllProcesses(self, self.multiprocess_dir))
        self.registry.register(_Snapshot(self))
        # process_* (CPU, open files, the primary's memory), as every Prometheus exporter has
        ProcessCollector(registry=self.registry)

    # -- counting (on the server's event loop, or the refresher's thread) --

    def observe(self, protocol: str, request: str, code: str, seconds: float) -> None:
        children = self._children(protocol, request, code)
        children[0].inc()
        children[1].observe(seconds)

    def _children(self, protocol: str, request: str, code: str) -> tuple[Any, Any]:
        # the hot path: each (protocol, request, code)'s children looked up once
        key = (protocol, request, code)
        children = self._observed.get(key)
        if children is None:
            result = request_result(protocol, code)
            children = (
                self._requests.labels(protocol, request, code, result),
                self._latency.labels(protocol),
            )
            self._observed[key] = children
        return children

    def observe_many(self, protocol: str, observed: Iterable[tuple[str, str, float]]) -> None:
        """`observe` for each (request, code, seconds), with each value written once: a
        multiprocess value's write takes a lock, a getpid() and a file write, three per
        request otherwise (the remoting listener counts a read's pipelined requests here)."""
        counts: dict[tuple[str, str], int] = {}  # a plain dict: a Counter costs more to make
        seconds = []
        for request, code, took in observed:
            key = (request, code)
            counts[key] = counts.get(key, 0) + 1
            seconds.append(took)
        latency = None
        for (request, code), n in counts.items():
            requests, latency = self._children(protocol, request, code)
            requests.inc(n)
        if latency is not None:  # the protocol's histogram (the same child for every key)
            _observe_all(latency, seconds)

    def observe_build(self, how: str, seconds: float) -> None:
        self._builds.labels(how).observe(seconds)
        self.last_build_seconds = seconds

    def refreshed(self, result: str) -> None:
        """A snapshot poll's result: `swapped` and `unchanged` mean a snapshot is served."""
        self._refreshes.labels(result).inc()
        if result in ("swapped", "unchanged") and not self.serving_snapshot:
            self.serving_snapshot = True
            self._snapshot_loaded.set(1)
        # Worker processes are not scraped: each poll keeps their memory current.
        self._memory.set(resident_memory_bytes())

    def frame_error(self, reason: str) -> None:
        self._frame_errors.labels(reason).inc()

    def reject(self, listener: str, reason: str) -> None:
        self._rejections.labels(listener, reason).inc()

    def connection_opened(self) -> None:
        self._connections.inc()

    def connection_closed(self) -> None:
        self._connections.dec()

    def readyz_stale(self) -> None:
        self._readyz_stale.inc()

    # -- reading back (tests, logs) --

    @property
    def refreshes(self) -> Tally[str]:
        return Tally(
            {k: int(v) for k, v in self._own(f"{self.prefix}_refreshes_total", "result").items()}
        )

    @property
    def rejections(self) -> Tally[tuple[str, str]]:
        counted = self._own(f"{self.prefix}_rejections_total", "listener", "reason")
        return Tally({k: int(v) for k, v in counted.items()})

    @property
    def connections(self) -> int:
        return int(self._own(f"{self.prefix}_connections").get((), 0))

    def _own(self, sample: str, *labels: str) -> dict[Any, float]:
        return label_values(self.counted, sample, *labels)

    # -- several worker processes (workers.py) --

    def attach(self, pool: WorkerPool) -> None:
        """Worker processes besides this one: in /readyz and in /metrics."""
        self.pool = pool

    def workers_loading(self) -> int:
        """Worker processes that cannot answer yet (0 without workers)."""
        return self.pool.loading() if self.pool is not None else 0

    def processes_with_snapshot(self) -> set[int]:
        """The pids of the live processes (this one, its workers) that serve a snapshot."""
        if self.multiprocess_dir is None:
            return {os.getpid()} if self.serving_snapshot else set()
        files = glob.glob(os.path.join(self.multiprocess_dir, "gauge_liveall_*.db"))
        name = self.snapshot_loaded_name
        merged = MultiProcessCollector.merge(files, accumulate=False)  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
        return {
            int(s.labels["pid"])
            for family in merged
            if family.name == name
            for s in family.samples
            if s.value
        }

    def stale_watermark_age(self, watermark: int | None, now: float | None = None) -> float | None:
        """Wall clock minus the watermark, if that exceeds the bound (or there is none)."""
        if self.max_watermark_age_s <= 0:
            return None
        age = (time.time() if now is None else now) - (watermark or 0) / 1000
        return age if age > self.max_watermark_age_s else None

    def register(self, families: Callable[[], Iterable[Metric]]) -> None:
        """Another part's metrics in this registry: a function of metric families."""
        self.registry.register(_Calls(families))

    def exposition(self) -> bytes:
        """What /metrics shows now (tests, promtool)."""
        return generate_latest(self.registry)


class _Calls(Collector):
    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families()
