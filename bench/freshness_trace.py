"""Where a change's freshness goes, from a `stream_bench ... --trace FILE` run.

    .venv/bin/python -m bench.stream_bench realtime ... --trace /tmp/trace.jsonl
    .venv/bin/python -m bench.freshness_trace /tmp/trace.jsonl

For every measured change (a REGISTER with a (broker, dataVersion) not seen before): produced
(the bench's send) -> acknowledged by Kafka (in the log, readable by the job) -> its eventTime
passed by a published watermark (the first batch whose
tables show it) -> that batch's broker_live_table commit (the Delta log's commit timestamp,
what any reader can see from then on) -> the bench's poller saw it. Printed: the percentiles
of each part, over the changes produced after the first minute, and the batches' Spark phases.
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import re
import statistics
import threading
import time
from pathlib import Path

from bench.fleet_process import FleetProcess


class TraceWriter(logging.Handler):
    """`stream_bench ... --trace FILE`: JSON lines, each with the wall clock in ms: the run's
    warehouse; every job log line (the batch published; Spark's progress with its phase
    durations); every poll of broker_live_table (its version, how long the read took); at the
    end every measured change (eventTime, handed to send(), acknowledged by Kafka, seen)."""

    LOGGERS = ("routelake.route_state", "routelake.progress")

    def __init__(self, path: str, work: Path) -> None:
        super().__init__(logging.INFO)
        self._file = open(path, "w")  # noqa: SIM115  # closed by changes(), the last write
        self._lock = threading.Lock()
        self.write("start", warehouse=str(work / "warehouse"))
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
            logging.getLogger(name).setLevel(logging.INFO)

    def write(self, kind: str, **fields: object) -> None:
        line = json.dumps({"kind": kind, "wall_ms": int(time.time() * 1000), **fields})
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")

    def emit(self, record: logging.LogRecord) -> None:
        self.write("log", logger=record.name, message=record.getMessage())

    def changes(
        self, fleet: FleetProcess, seen_at: dict[tuple, float], seen_version: dict[tuple, int]
    ) -> None:
        """One line per measured change, then the file is closed."""
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)
        for key, change in fleet.changes.items():
            seen = seen_at.get(key)
            self.write(
                "change",
                addr=key[0],
                broker=change.broker,
                version=list(key[1:]),
                event_time=change.event_time,
                sent_ms=int(change.sent * 1000),
                acked_ms=None if change.acked is None else int(change.acked * 1000),
                seen_ms=None if seen is None else int(seen * 1000),
                seen_version=seen_version.get(key),
                since_start_s=round(change.sent - fleet.started, 3),
            )
        with self._lock:
            self._file.close()


BATCH = re.compile(r"batch (\d+) published: watermark (\d+) in ([\d.]+)s")
PROGRESS = re.compile(r"progress batch (\d+): (\d+) input rows.*durations (.*)$")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _line(name: str, values: list[float]) -> str:
    if not values:
        return f"{name}: none"
    return (
        f"{name:<44} p50 {statistics.median(values):6.1f}  p95 {_pct(values, 0.95):6.1f}  "
        f"max {max(values):6.1f}"
    )


def _commits(table: Path) -> dict[int, tuple[int, int | None]]:
    """Delta version -> (commit timestamp ms, the job's batch id from its txn action)."""
    out: dict[int, tuple[int, int | None]] = {}
    for path in sorted((table / "_delta_log").glob("*.json")):
        timestamp, batch = 0, None
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                timestamp = action["commitInfo"].get("timestamp", 0)
            if "txn" in action:
                batch = action["txn"]["version"]
        out[int(path.stem)] = (timestamp, batch)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace")
    parser.add_argument("--warehouse", help="default: the run's, from the trace")
    parser.add_argument("--after-s", type=float, default=60.0, help="changes produced after")
    parser.add_argument("--slowest", type=int, default=10, help="print the slowest N")
    args = parser.parse_args()

    records = [json.loads(line) for line in Path(args.trace).read_text().splitlines()]
    batches: list[tuple[int, int, int, float]] = []  # (watermark, published ms, id, seconds)
    progress: dict[int, tuple[int, int, dict[str, int]]] = {}  # id -> (end ms, rows, phases)
    for r in records:
        if r["kind"] != "log":
            continue
        if m := BATCH.search(r["message"]):
            batches.append((int(m[2]), r["wall_ms"], int(m[1]), float(m[3])))
        elif m := PROGRESS.search(r["message"]):
            phases = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)ms", m[3])}
            progress[int(m[1])] = (r["wall_ms"], int(m[2]), phases)
    batches.sort(key=lambda b: b[1])
    start = next(r for r in records if r["kind"] == "start")
    commits = _commits(Path(args.warehouse or start["warehouse"]) / "broker_live_table")
    commit_of_batch = {batch: ts for ts, batch in commits.values() if batch is not None}

    changes = [r for r in records if r["kind"] == "change" and r["since_start_s"] >= args.after_s]
    parts: dict[str, list[float]] = {}
    rows = []
    watermarks = [b[0] for b in batches]  # published in order: watermarks never go back
    for c in changes:
        if c["seen_ms"] is None:
            parts.setdefault("never seen", []).append(1)
            continue
        i = bisect.bisect_left(watermarks, c["event_time"])
        if i == len(batches):
            continue
        watermark, published, batch_id, seconds = batches[i]
        commit = commit_of_batch.get(batch_id, published)
        end, _, phases = progress.get(batch_id, (published, 0, {}))
        trigger_start = end - phases.get("triggerExecution", 0)
        total = (c["seen_ms"] - c["sent_ms"]) / 1000
        split = {
            "total (produced -> seen by the poller)": total,
            "produced - eventTime (producer behind)": (c["sent_ms"] - c["event_time"]) / 1000,
            "produced -> acknowledged by Kafka": ((c["acked_ms"] or c["sent_ms"]) - c["sent_ms"])
            / 1000,
            "acknowledged -> broker_live_table commit": (commit - (c["acked_ms"] or c["sent_ms"]))
            / 1000,
            "produced -> start of the applying batch": (trigger_start - c["sent_ms"]) / 1000,
            "its start -> broker_live_table commit": (commit - trigger_start) / 1000,
            "produced -> broker_live_table commit": (commit - c["sent_ms"]) / 1000,
            "commit -> seen by the poller": (c["seen_ms"] - commit) / 1000,
        }
        for name, value in split.items():
            parts.setdefault(name, []).append(value)
        rows.append((total, c, batch_id, watermark, split))
    print(f"{len(changes)} changes produced after {args.after_s:.0f} s; {len(batches)} batches")
    for name, values in parts.items():
        print(_line(name, values) if name != "never seen" else f"never seen: {len(values)}")
    print("slowest:")
    for total, c, batch_id, watermark, split in sorted(rows, key=lambda r: -r[0])[: args.slowest]:
        print(
            f"  {total:6.1f} s {c['broker']} {c['addr']} produced +{c['since_start_s']:.0f} s "
            f"-> batch {batch_id} (watermark {watermark}); "
            + ", ".join(f"{v:.1f}" for v in split.values())
        )
    print("batches: id, input rows, Spark phases (ms), writer seconds")
    for watermark, _published, batch_id, seconds in batches:
        end, input_rows, phases = progress.get(batch_id, (0, 0, {}))
        spark = " ".join(f"{k}={v}" for k, v in phases.items())
        print(f"  {batch_id:4d} rows {input_rows:6d} wm {watermark} writer {seconds:6.2f}  {spark}")


if __name__ == "__main__":
    main()
