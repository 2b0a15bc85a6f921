"""bench/partition_lookup.py's arithmetic: which instants a partition's "gone" and "back" are
timed from (the poll against a running lookup is exercised by the stream bench itself)."""

from __future__ import annotations

import http.server
import queue
import threading
import time
from pathlib import Path

from bench.partition_lookup import LookupWatch, _poll

WALL_START_MS = 1_000_000
START_MS, END_MS = WALL_START_MS + 180_000, WALL_START_MS + 330_000


def _watch() -> LookupWatch:
    # the bench's monotonic clock read 500.0 at the fleet's event time WALL_START_MS
    return LookupWatch({"g-a", "g-b"}, START_MS, END_MS, 500.0, WALL_START_MS)


def _register(
    name: str, addr: str, at_ms: int, timeout_ms: int = 120_000, broker_id: int = 0
) -> dict:
    return {
        "brokerName": name,
        "brokerAddr": addr,
        "brokerId": broker_id,
        "eventType": "REGISTER",
        "eventTime": at_ms,
        "heartbeatTimeoutMillis": timeout_ms,
    }


def test_deadline_is_the_groups_last_broker_timeout_on_the_bench_clock() -> None:
    watch = _watch()
    watch.sent(_register("g-a", "10.0.0.1:10911", START_MS - 20_000))
    watch.sent(_register("g-a", "10.0.0.2:10911", START_MS - 5_000))
    heartbeat = _register("g-a", "10.0.0.1:10911", START_MS - 1_000)
    watch.sent(heartbeat | {"eventType": "HEARTBEAT"})  # refreshes that broker
    # a broker whose timeout outlasts the partition: the group never expires
    watch.sent(_register("g-b", "10.0.0.3:10911", START_MS - 1_000, timeout_ms=600_000))
    watch._deadlines()
    assert watch.groups["g-a"].deadline == 500.0 + (180_000 - 1_000 + 120_000) / 1000
    assert watch.groups["g-b"].deadline is None


def test_back_is_timed_from_kafkas_acknowledgement_of_the_return() -> None:
    watch = _watch()
    watch.sent(_register("g-a", "10.0.0.1:10911", START_MS - 1_000))
    # the slave registers first: it brings no route back (master-only topic configs)
    watch.sent(_register("g-a", "10.0.0.2:10911", END_MS + 1_000, broker_id=1))
    watch.sent(_register("g-a", "10.0.0.1:10911", END_MS + 4_000))  # due at 834.0
    watch.return_acked("g-a", 860.0)  # the fleet was 26 s behind its clock
    watch.return_acked("g-a", 870.0)  # only the first return counts
    group = watch.groups["g-a"]
    group.seen_at, group.gone_at, group.back_at = 600.0, 814.0, 871.5  # as the poll saw it
    report = watch.report()
    # deadline 500 + 299 = 799: gone 15.0 s after it; back 11.5 s after the ack, not 37.5
    assert "1 of 2 cut-off groups past their expiry deadline" in report
    assert "stopped serving them at most 15.0 s after the deadline" in report
    assert "served them again at most 11.5 s after Kafka acknowledged their return" in report
    assert "returns acknowledged at most 26.0 s after their due time" in report


def test_a_group_never_seen_before_its_deadline_is_not_measured() -> None:
    watch = _watch()
    watch.sent(_register("g-a", "10.0.0.1:10911", START_MS - 1_000))
    watch.groups["g-a"].seen_at = 900.0  # the lookup was not ready before the deadline
    assert "0 of 2 cut-off groups" in watch.report()


def test_the_delays_split_where_the_job_published(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    watch = _watch()
    watch.warehouse = tmp_path
    watch.sent(_register("g-a", "10.0.0.1:10911", START_MS - 1_000))  # deadline 799.0
    watch.sent(_register("g-a", "10.0.0.1:10911", END_MS + 4_000))  # due at 834.0
    watch.return_acked("g-a", 835.0)
    group = watch.groups["g-a"]
    group.seen_at, group.gone_at, group.back_at = 600.0, 813.0, 848.0

    def wall_ms(monotonic: float) -> int:
        return round((monotonic - watch._monotonic_minus_wall) * 1000)

    deadline_ms, return_ms = START_MS - 1_000 + 120_000, END_MS + 4_000
    rows = [  # (watermark, published at on the bench's clock)
        (deadline_ms, 810.0),  # W = deadline: not expired yet (lastUpdate + timeout < W)
        (deadline_ms + 500, 812.5),  # published 13.5 s after the deadline
        (return_ms - 1, 845.0),
        (return_ms + 900, 847.0),  # the return: 12.0 s after Kafka's acknowledgement
    ]
    table = pa.table(
        {
            "watermark": pa.array([w for w, _ in rows], pa.int64()),
            "committed_at_ms": pa.array([wall_ms(at) for _, at in rows], pa.int64()),
        }
    )
    write_deltalake(str(tmp_path / "route_progress"), table)

    report = watch.report()
    assert "the job published the expiry median 13.5 s / max 13.5 s after it" in report
    assert "the lookup stopped median 0.5 s / max 0.5 s after that" in report
    assert "the job published the return median 12.0 s / max 12.0 s after the ack" in report
    assert "the lookup served it median 1.0 s / max 1.0 s after that" in report


def test_the_poll_reports_seen_gone_back_once_each() -> None:
    """_poll against an HTTP server that answers a topic's route with 200 while it is served,
    404 (TOPIC_NOT_EXIST) while not, as the lookup does."""
    served = {"g-a": False, "g-b": True, "g-c": True}

    class Routes(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # one connection for every poll, as with the lookup

        def do_GET(self) -> None:
            name = self.path.split("/")[2]
            self.send_response(200 if served[name] else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Routes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reports: queue.Queue[tuple[str, str, float]] = queue.Queue()
    stop = threading.Event()
    now = time.monotonic()
    # the partition starts in an hour; g-a and g-b may go (their expiry deadline is due) and
    # come back (their return acknowledged) at once; g-c's deadline is in an hour: it is not
    # followed after it was seen
    dues = {
        "g-a": [("seen", "g-a", now), ("gone", "g-a", now)],
        "g-b": [("seen", "g-b", now), ("gone", "g-b", now)],
        "g-c": [("seen", "g-c", now + 3600)],
    }
    pollers = []
    for name, times in dues.items():
        told: queue.Queue[tuple[str, str, float]] = queue.Queue()
        for due in times:
            told.put(due)
        pollers.append(
            threading.Thread(
                target=_poll,
                args=(server.server_address[1], [name], reports, stop, now + 3600, told),
                daemon=True,
            )
        )
    for poller in pollers:
        poller.start()

    # the three pollers report in any order: a report of another group waits for its turn
    # (dropping it hung the test when g-c's came before g-b's); sweeps are not kept
    waiting: list[tuple[str, str, float]] = []

    def next_report(name: str) -> tuple[str, float]:
        deadline = time.monotonic() + 10
        while True:
            for report in waiting:
                if report[0] == name:
                    waiting.remove(report)
                    return report[1], report[2]
            left = deadline - time.monotonic()
            assert left > 0, f"no report for {name} within 10 s; others: {waiting}"
            try:
                report = reports.get(timeout=left)
            except queue.Empty:
                continue
            if report[0]:
                waiting.append(report)

    try:
        assert next_report("g-b")[0] == "seen"
        assert next_report("g-c")[0] == "seen"
        served["g-c"] = False
        served["g-a"] = True
        assert next_report("g-a")[0] == "seen"
        served["g-a"] = False
        before = time.monotonic()
        what, at = next_report("g-a")
        assert what == "gone" and before <= at <= time.monotonic()
        served["g-a"] = True
        assert next_report("g-a")[0] == "back"
        served["g-a"] = False  # a group back is not followed any more
        time.sleep(1)
        assert [r for r in [*waiting, *reports.queue] if r[0] in ("g-a", "g-c")] == []
        assert ("", "sweep") in {(r[0], r[1]) for r in reports.queue}
    finally:
        stop.set()
        for poller in pollers:
            poller.join(5)
        server.shutdown()
