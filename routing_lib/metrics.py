"""The streaming job's metrics, rendered in Prometheus text format."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# name -> (type, help)
JOB_METRICS: dict[str, tuple[str, str]] = {
    "routelake_batches_total": ("counter", "Micro-batches published"),
    "routelake_input_rows_total": ("counter", "Records read from the source"),
    "routelake_applied_events_total": ("counter", "Events applied to the route state"),
    "routelake_late_events_total": ("counter", "Events older than the published watermark"),
    "routelake_dead_letters_total": ("counter", "Invalid records sent to the dead-letter table"),
    "routelake_expired_brokers_total": ("counter", "Brokers expired by the event-time clock"),
    "routelake_row_changes_total": ("counter", "Route table row changes written"),
    "routelake_watermark_ms": ("gauge", "Event-time watermark of the published tables"),
    "routelake_batch_duration_seconds": ("gauge", "Duration of the last micro-batch"),
    "routelake_state_rows": ("gauge", "Broker groups held in the state store"),
    "routelake_kafka_offsets_behind_latest": ("gauge", "Kafka lag of the source (max)"),
}
_COUNTS = {
    "input_rows": "routelake_input_rows_total",
    "applied": "routelake_applied_events_total",
    "late": "routelake_late_events_total",
    "dead_lettered": "routelake_dead_letters_total",
    "expired": "routelake_expired_brokers_total",
    "changes": "routelake_row_changes_total",
}


class JobMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = {name: 0.0 for name in JOB_METRICS}

    def record_batch(self, watermark: int, counts: dict[str, int], seconds: float) -> None:
        with self._lock:
            self._values["routelake_batches_total"] += 1
            for key, name in _COUNTS.items():
                self._values[name] += counts.get(key, 0)
            self._values["routelake_watermark_ms"] = watermark
            self._values["routelake_batch_duration_seconds"] = seconds

    def set(self, name: str, value: float) -> None:
        with self._lock:
            self._values[name] = value

    def get(self, name: str) -> float:
        with self._lock:
            return self._values[name]

    def render(self) -> str:
        with self._lock:
            lines = []
            for name, (kind, text) in JOB_METRICS.items():
                lines += [
                    f"# HELP {name} {text}",
                    f"# TYPE {name} {kind}",
                    f"{name} {self._values[name]:g}",
                ]
        return "\n".join(lines) + "\n"


def serve_metrics(metrics: JobMetrics, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """GET /metrics on host:port ([serve] host), in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()
    return server
