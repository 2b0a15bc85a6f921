"""Prometheus text exposition for the network services, the lookup and the collector (no
client library needed): requests and rejections per listener, and the served snapshot.

All updates happen on the server's event loop thread, so plain counters suffice.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol


class ServedIndex(Protocol):
    """What the metrics render of the served snapshot (the lookup's RouteIndex has it): the
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
_PREFIX = "routelake_lookup"


def _labels(**labels: object) -> str:
    def esc(value: object) -> str:
        return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


class _Histogram:
    def __init__(self) -> None:
        self.buckets = [0] * len(LATENCY_BUCKETS)
        self.total = 0.0
        self.count = 0

    def copy(self) -> _Histogram:
        twin = _Histogram()
        twin.buckets, twin.total, twin.count = list(self.buckets), self.total, self.count
        return twin

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1
                break
        self.total += seconds
        self.count += 1

    def lines(self, name: str, **labels: object) -> Iterable[str]:
        cumulative = 0
        for bound, n in zip(LATENCY_BUCKETS, self.buckets, strict=True):
            cumulative += n
            yield f"{name}_bucket{_labels(**labels, le=bound)} {cumulative}"
        yield f"{name}_bucket{_labels(**labels, le='+Inf')} {self.count}"
        yield f"{name}_sum{_labels(**labels)} {self.total:.6f}"
        yield f"{name}_count{_labels(**labels)} {self.count}"


class Metrics:
    def __init__(self, max_watermark_age_s: float = 0.0) -> None:
        self.max_watermark_age_s = max_watermark_age_s  # 0: no staleness bound
        self.readyz_stale = 0
        # More exposition lines (the collector's, under `serve --collect`).
        self.extra: list[Callable[[], Iterable[str]]] = []
        self.requests: Counter[tuple[str, str, str]] = Counter()  # (protocol, request, code)
        self.latency: dict[str, _Histogram] = {}
        self.refreshes: Counter[str] = Counter()  # result
        self.frame_errors: Counter[str] = Counter()  # exception class
        self.rejections: Counter[tuple[str, str]] = Counter()  # (listener, reason)
        self.connections = 0
        self.last_refresh_error: str | None = None
        self.builds: Counter[str] = Counter()  # snapshot builds: "full" / "incremental"
        self.last_build_seconds: float | None = None
        self.peers: dict[int, dict[str, Any]] = {}  # worker pid -> its last export()
        self.expected_peers = 0  # worker processes besides this one

    # -- several worker processes (workers.py): each exports, the HTTP process sums --

    def export(self, ready: bool) -> dict[str, Any]:
        """This process's counters, for the process that serves /metrics."""
        return {
            "ready": ready,
            "requests": dict(self.requests),
            "latency": {p: (h.buckets, h.total, h.count) for p, h in self.latency.items()},
            "refreshes": dict(self.refreshes),
            "builds": dict(self.builds),
            "frame_errors": dict(self.frame_errors),
            "rejections": dict(self.rejections),
            "connections": self.connections,
        }

    def workers_loading(self) -> int:
        """Worker processes without a snapshot yet (or not reporting yet)."""
        reported = [p for p in self.peers.values() if p["ready"]]
        return max(0, self.expected_peers - len(reported))

    def _summed(self) -> Metrics:
        """This process's counters plus every worker's last export."""
        if not self.peers:
            return self
        total = Metrics()
        total.requests = Counter(self.requests)
        total.refreshes, total.builds = Counter(self.refreshes), Counter(self.builds)
        total.frame_errors, total.rejections = Counter(self.frame_errors), Counter(self.rejections)
        total.connections = self.connections
        total.latency = {p: h.copy() for p, h in self.latency.items()}
        for peer in self.peers.values():
            total.requests.update(peer["requests"])
            total.refreshes.update(peer["refreshes"])
            total.builds.update(peer["builds"])
            total.frame_errors.update(peer["frame_errors"])
            total.rejections.update(peer["rejections"])
            total.connections += peer["connections"]
            for protocol, (buckets, seconds, count) in peer["latency"].items():
                histogram = total.latency.setdefault(protocol, _Histogram())
                histogram.buckets = [a + b for a, b in zip(histogram.buckets, buckets, strict=True)]
                histogram.total += seconds
                histogram.count += count
        return total

    def stale_watermark_age(self, watermark: int | None, now: float | None = None) -> float | None:
        """Wall clock minus the watermark, if that exceeds the bound (or there is none)."""
        if self.max_watermark_age_s <= 0:
            return None
        age = (time.time() if now is None else now) - (watermark or 0) / 1000
        return age if age > self.max_watermark_age_s else None

    def observe_build(self, how: str, seconds: float) -> None:
        self.builds[how] += 1
        self.last_build_seconds = seconds

    def observe(self, protocol: str, request: str, code: str, seconds: float) -> None:
        self.requests[(protocol, request, code)] += 1
        self.latency.setdefault(protocol, _Histogram()).observe(seconds)

    def render(
        self, index: ServedIndex | None, loaded_at: float | None, now: float | None = None
    ) -> str:
        now = time.time() if now is None else now
        out: list[str] = []
        summed = self._summed()

        def family(name: str, kind: str, help_text: str) -> str:
            full = f"{_PREFIX}_{name}"
            out.extend((f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"))
            return full

        name = family("requests_total", "counter", "Requests answered, by protocol, request, code.")
        for (protocol, request, code), n in sorted(summed.requests.items()):
            out.append(f"{name}{_labels(protocol=protocol, request=request, code=code)} {n}")
        name = family("request_seconds", "histogram", "Time to answer one request.")
        for protocol, histogram in sorted(summed.latency.items()):
            out.extend(histogram.lines(name, protocol=protocol))
        name = family("refresh_total", "counter", "Snapshot refresh attempts by result.")
        for result, n in sorted(summed.refreshes.items()):
            out.append(f"{name}{_labels(result=result)} {n}")
        name = family("snapshot_builds_total", "counter", "Snapshots built, by kind.")
        for how, n in sorted(summed.builds.items()):
            out.append(f"{name}{_labels(kind=how)} {n}")
        if self.last_build_seconds is not None:
            name = family(
                "snapshot_build_seconds", "gauge", "Time to build the last snapshot served."
            )
            out.append(f"{name} {self.last_build_seconds:.3f}")
        name = family("frame_errors_total", "counter", "Connections closed on a bad frame.")
        for reason, n in sorted(summed.frame_errors.items()):
            out.append(f"{name}{_labels(reason=reason)} {n}")
        name = family(
            "rejections_total",
            "counter",
            "Connections closed or requests refused by a limit, by listener, reason.",
        )
        for (listener, reason), n in sorted(summed.rejections.items()):
            out.append(f"{name}{_labels(listener=listener, reason=reason)} {n}")
        name = family("connections", "gauge", "Open remoting connections.")
        out.append(f"{name} {summed.connections}")
        name = family("ready", "gauge", "1 once a snapshot is loaded.")
        out.append(f"{name} {int(index is not None)}")
        if self.expected_peers:
            name = family(
                "workers",
                "gauge",
                "Worker processes on the remoting port besides this one, by state "
                "(counters above are summed over all processes).",
            )
            loading = self.workers_loading()
            out.append(f"{name}{_labels(state='ready')} {self.expected_peers - loading}")
            out.append(f"{name}{_labels(state='loading')} {loading}")
        if index is not None and loaded_at is not None:
            name = family("snapshot_age_seconds", "gauge", "Seconds since the snapshot loaded.")
            out.append(f"{name} {now - loaded_at:.3f}")
            if index.watermark is not None:
                name = family(
                    "snapshot_watermark_age_seconds",
                    "gauge",
                    "Wall clock minus the snapshot's event-time watermark.",
                )
                out.append(f"{name} {now - index.watermark / 1000:.3f}")
                name = family("snapshot_watermark_ms", "gauge", "The snapshot's watermark.")
                out.append(f"{name} {index.watermark}")
            if self.max_watermark_age_s > 0:
                name = family(
                    "watermark_stale",
                    "gauge",
                    "1 while the watermark is older than [serve] "
                    "max_watermark_age_s (then /readyz fails).",
                )
                stale = self.stale_watermark_age(index.watermark, now) is not None
                out.append(f"{name} {int(stale)}")
            name = family("table_version", "gauge", "Delta version of each table served.")
            out.extend(_table_lines(name, index.versions))
            name = family("snapshot_topics", "gauge", "Topics with a route in the snapshot.")
            out.append(f"{name} {index.route_count}")
        name = family("readyz_stale_total", "counter", "/readyz answered 503: stale watermark.")
        out.append(f"{name} {self.readyz_stale}")
        for lines in self.extra:
            out.extend(lines())
        return "\n".join(out) + "\n"


def _table_lines(name: str, versions: Mapping[str, int]) -> Iterable[str]:
    for table, version in sorted(versions.items()):
        yield f"{name}{_labels(table=table)} {version}"
