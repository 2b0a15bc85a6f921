"""Stage one over the live stress run's cold phase, as its two Python workers see it.

    .venv/bin/python -m bench.cold_stage_one                      # the job's frames
    .venv/bin/python -m bench.cold_stage_one --per-record-writes  # each table on its own

The stress fleet of `stream_bench realtime` (300 x 10 000, a fault per group every 20 s) for
the first --duration seconds of event time, cut into the live run's first micro-batches where
eventTime crosses --cuts (the quiet run of 2026-11-28 read ~8, 23, 35 and 50 s in its
batches 0-3). Each batch's records are cut into two halves as the Kafka source's
minPartitions 2 cuts its offsets, and each half is classified as one frame by one of two
workers (each with its own known records and tables; the halves rotate between them), the
frame's new tables written to a content folder under .work the way the Kafka classifier
writes them (routing_lib/spark/sources.py: at the end of the frame). Printed per batch:
process CPU (all threads) and wall; at the end the tables each worker validated and the
fsyncs of content files and folders. No Spark: the Python CPU of stage one alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import threading
import time
import types
from pathlib import Path

import routing_lib.content_files as content_files
from bench.steady_replay import batches
from routing_lib import ingest
from routing_lib.content_files import ContentSettings
from routing_lib.core.content import CONTENT
from routing_lib.known_records import KnownRecords, cut_event_time
from routing_lib.known_tables import KnownTables

_fsyncs = {"files": 0, "folders": 0}
_lock = threading.Lock()
_fsync = content_files._fsync


def _counted_fsync(path: str | Path) -> None:
    with _lock:
        _fsyncs["folders" if os.path.isdir(path) else "files"] += 1
    _fsync(path)


def live_batches(duration_s: float, cuts_s: list[float]) -> list[list[bytes]]:
    fleet = types.SimpleNamespace(
        brokers=300,
        topics=10_000,
        duration=duration_s,
        fault_interval_ms=20_000,
        batch_events=500,
        batch_ms=500,
        partition_at=None,
        partition_fraction=0.5,
        partition_s=150,
    )
    lines = [line for batch in batches(fleet) for line in batch]
    first = _event_time(lines[0])
    cut_at = [first + int(s * 1000) for s in cuts_s]
    out: list[list[bytes]] = [[]]
    for line in lines:
        while cut_at and _event_time(line) >= cut_at[0]:
            cut_at.pop(0)
            out.append([])
        out[-1].append(line)
    return out


def _event_time(line: bytes) -> int:
    cut = cut_event_time(line)
    assert cut is not None, line[:80]
    return cut[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=45)
    parser.add_argument("--cuts", default="8,23,35,50", help="batch ends, event-time s")
    parser.add_argument(
        "--per-record-writes",
        action="store_true",
        help="each new table durable before the next record (the code before ce75d2b)",
    )
    args = parser.parse_args()
    content_files._fsync = _counted_fsync
    live = live_batches(args.duration, [float(c) for c in args.cuts.split(",")])
    Path(".work").mkdir(exist_ok=True)
    store = ContentSettings(tempfile.mkdtemp(prefix="cold-stage-one-", dir=".work"), 4096)
    workers = [(ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES), (KnownRecords(), KnownTables())]
    offset, cpu_total, wall_total = 0, 0.0, 0.0
    for number, lines in enumerate(live):
        half = -(-len(lines) // 2)
        cpu, wall = time.process_time(), time.perf_counter()
        for part in range(2):
            ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES = workers[(part + number) % 2]
            frame = (
                contextlib.nullcontext() if args.per_record_writes else CONTENT.deferred_writes()
            )
            with frame:
                for i, line in enumerate(lines[part * half : (part + 1) * half]):
                    ingest.classify(line, "t-0", offset + part * half + i, None, 0, store=store)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        cpu_total, wall_total, offset = cpu_total + cpu, wall_total + wall, offset + len(lines)
        print(f"batch {number}: {len(lines)} records, CPU {cpu:.2f} s, wall {wall:.2f} s")
    validated = [len(tables) for _, tables in workers if tables is not None]
    print(
        f"total CPU {cpu_total:.2f} s, wall {wall_total:.2f} s; tables validated per worker "
        f"{validated}; content writes {CONTENT.backend_writes}; fsyncs {_fsyncs}; "
        f"load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
