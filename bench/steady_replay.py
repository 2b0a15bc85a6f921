"""The live stress run's micro-batches replayed without Spark: CPU per batch of the Python side.

    .venv/bin/python -m bench.steady_replay --brokers 300 --topics 10000 --duration 150

The stress fleet of `stream_bench realtime` (the simulator, a fault per group every 20 s) in
arrival order, cut into batches of --batch-events (~500: the live run's batch of ~7 s). Each
batch is handled as a live micro-batch is: stage one classifies its records (`classify`, with
a content folder), the rows go to their group, and the real step function runs (pyspark's own
GroupState carrying each group's state) for every group with rows and every group whose
timeout the batch's watermark passed, at the watermark Spark gives that batch (the largest
eventTime of the batches before, minus the watermark delay). CPU time (process time) per batch
of each phase is printed, then the medians over the batches past --skip-s seconds of event
time. The Spark step's wall time per batch minus these is Spark's own share (the Kafka source,
Arrow between the JVM and Python, the shuffle, the state store).

`--profile FILE` writes a cProfile of the batches past --skip-s (pstats format).
"""

from __future__ import annotations

import argparse
import cProfile
import statistics
import tempfile
import time
from collections import defaultdict
from typing import Any

import pandas as pd

from bench.backfill_bench import HEARTBEATS_PER_PERIOD, PERIOD_MS, SEED
from routing_lib import ingest
from routing_lib.content_files import ContentSettings
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.ingest import classify
from routing_lib.known_records import KnownRecords
from routing_lib.spark.stateful import StepSettings, make_step
from routing_lib.spark.watermark import SPARK_LEAD_MS
from tests.support.step_support import group_state

COLUMNS = ["event_time", "source", "position", "payload"]


def batches(args):
    """The fleet's records in arrival order, `args.batch_events` at a time, or (--batch-ms)
    cut where eventTime crosses each multiple of --batch-ms: a live run's batches at a steady
    batch time, as the fleet sends each event at its eventTime. With --partition-at, the
    partition's cut-off groups' events are left out as `stream_bench realtime` leaves them."""
    from bench.fleet_process import _Silence, partition_cut
    from routelake_dev.simulator import EventEncoder, iter_history

    start_ms = 1_764_000_000_000
    silence = None
    if args.partition_at is not None:
        from routelake_dev.simulator import FleetSimulator

        names = [g.name for g in FleetSimulator(SEED, args.brokers, 0, PERIOD_MS, start_ms)._groups]
        cut_at = start_ms + int(args.partition_at * 1000)
        silence = _Silence(
            partition_cut(names, args.partition_fraction),
            cut_at,
            cut_at + int(args.partition_s * 1000),
        )
    history = iter_history(
        SEED,
        args.brokers,
        args.topics,
        int(args.duration * 1000),
        PERIOD_MS,
        start_ms,
        heartbeats_per_period=HEARTBEATS_PER_PERIOD,
        fault_interval_ms=args.fault_interval_ms,
    )
    encode, window_end = EventEncoder(), start_ms + (args.batch_ms or 0)
    batch: list[bytes] = []
    for event in history:
        if silence is not None and silence.silences(event):
            continue
        if args.batch_ms and event["eventTime"] >= window_end and batch:
            yield batch
            batch = []
            window_end += args.batch_ms * (1 + (event["eventTime"] - window_end) // args.batch_ms)
        batch.append(encode(event))
        if not args.batch_ms and len(batch) == args.batch_events:
            yield batch
            batch = []
    if batch:
        yield batch


def _known_tables():
    """A fresh KnownTables, when the code measured has them (an older tree may not)."""
    try:
        from routing_lib.known_tables import KnownTables
    except ImportError:
        return None
    return KnownTables()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--brokers", type=int, default=300)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=150)
    parser.add_argument("--fault-interval-ms", type=int, default=20_000)
    parser.add_argument("--batch-events", type=int, default=500)
    parser.add_argument("--batch-ms", type=int, default=0, help="cut by eventTime instead")
    parser.add_argument("--partition-at", type=float, help="event-time s, as stream_bench's")
    parser.add_argument("--partition-fraction", type=float, default=0.5)
    parser.add_argument("--partition-s", type=float, default=150)
    parser.add_argument("--watermark-delay-ms", type=int, default=10_000)
    parser.add_argument("--skip-s", type=float, default=60)
    parser.add_argument(
        "--stage-one-workers",
        type=int,
        default=1,
        help="Python workers classifying each batch ([kafka] min_partitions): each has its "
        "own known records and tables",
    )
    parser.add_argument("--profile", help="cProfile of the batches past --skip-s to this file")
    args = parser.parse_args()

    store = ContentSettings(tempfile.mkdtemp(prefix="steady-replay-content-"), 4096)
    step = make_step(StepSettings("/nonexistent-checkpoint", DEFAULT_FLAGS, content=store))
    # stage one's per-process memories, one pair per Python worker ([kafka] min_partitions)
    workers: list[tuple[Any, Any]] = [
        (getattr(ingest, "KNOWN_RECORDS", None), getattr(ingest, "KNOWN_TABLES", None)),
        *[(KnownRecords(), _known_tables()) for _ in range(args.stage_one_workers - 1)],
    ]
    states: dict[str, tuple | None] = {}
    timeouts: dict[str, int] = {}
    max_event_time, first_event_time, offset = 0, None, 0
    profiler = cProfile.Profile() if args.profile else None
    rows = []
    for number, lines in enumerate(batches(args)):
        watermark = max(max_event_time - args.watermark_delay_ms, 0)  # from the batches before
        spark_watermark = watermark + SPARK_LEAD_MS if watermark else 0
        event_s = (watermark - first_event_time) / 1000 if first_event_time and watermark else 0
        profiling = profiler is not None and event_s >= args.skip_s
        if profiler is not None and profiling:
            profiler.enable()
        started = time.process_time()
        classified = []
        cut = -(-len(lines) // len(workers))
        for part in range(len(workers)):
            # Spark hands each range of offsets to whichever Python worker is free: rotate
            ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES = workers[(part + number) % len(workers)]
            first = part * cut
            classified += [
                classify(line, "steady-0", offset + first + i, None, 0, store=store)
                for i, line in enumerate(lines[first : first + cut])
            ]
        offset += len(lines)
        stage_one = time.process_time() - started
        by_group: dict[str, list] = defaultdict(list)
        for c in classified:
            by_group[c.group_key].append((c.event_time, c.source, c.position, c.payload))
            max_event_time = max(max_event_time, c.event_time)
        first_event_time = first_event_time or min(c.event_time for c in classified)
        due = [g for g, t in timeouts.items() if t < spark_watermark and g not in by_group]
        started = time.process_time()
        out_rows = 0
        for group in [*by_group, *due]:
            state = group_state(states.get(group), spark_watermark)
            frames = [pd.DataFrame(by_group[group], columns=COLUMNS)] if group in by_group else []
            out_rows += sum(len(f) for f in step((group,), iter(frames), state))
            states[group] = tuple(state.get) if state.exists else None
            timeouts.pop(group, None)
            # Spark resets a group's timeout at every call: what this call set (-1: none)
            if state.exists and state._timeout_timestamp > 0:
                timeouts[group] = state._timeout_timestamp
        stepped = time.process_time() - started
        if profiler is not None and profiling:
            profiler.disable()
        registers = sum(line.startswith(b'{"eventType":"REGISTER"') for line in lines)
        megabytes = sum(map(len, lines)) / 1e6
        rows.append((number, event_s, stage_one, stepped, len(by_group) + len(due), registers))
        print(
            f"batch {number:3d} wm +{event_s:6.1f} s: stage one {stage_one:5.2f} s, "
            f"step {stepped:5.2f} s ({len(by_group)} groups with rows, {len(due)} timed out, "
            f"{registers} REGISTERs, {megabytes:.0f} MB, {out_rows} output rows)",
            flush=True,
        )
    steady = [r for r in rows if r[1] >= args.skip_s]
    if steady:
        print(
            f"steady ({len(steady)} batches past {args.skip_s:.0f} s), median CPU per batch: "
            f"stage one {statistics.median(r[2] for r in steady):.2f} s, "
            f"step {statistics.median(r[3] for r in steady):.2f} s, "
            f"calls {statistics.median(r[4] for r in steady):.0f}, "
            f"REGISTERs {statistics.median(r[5] for r in steady):.0f}"
        )
    if profiler is not None:
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
