"""CPU cost of the Python side of a backfill, without Spark: stage one (classify) and the
stateful step over one broker group's events, timed with process CPU time.

    .venv/bin/python -m bench.step_bench --events 30000 --groups 20 --topics 100

Generates the events of `bench/backfill_bench.py` (the fleet simulator: REGISTER every 30 s with
the full topic table, HEARTBEATs every 5 s, faults), or reads them from `--lines FILE` (one
record per line; `--save FILE` writes them). Classifies them as stage one does, then runs the
real step function (pyspark's own GroupState carrying state) the way an AvailableNow backfill
runs it: one micro-batch that parks every event (watermark 0), then one that applies them all.
Prints CPU microseconds per event for each phase. `--batches N` applies the events in N
micro-batches instead (each batch brings the events of one slice of event time and applies
those of the slice before, as a live query does), so each fault is diffed on its own;
`--fault-interval-ms` sets the simulator's mean time between faults per group (the stress
profile of `bench/stream_bench.py` uses 20 000).

Before/after: save the lines once, then run this file with an older commit's worktree first on
PYTHONPATH (its routing_lib is measured): `PYTHONPATH=/tmp/before python bench/step_bench.py
--lines FILE`.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import pandas as pd

from routing_lib.content_files import ContentSettings
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.ingest import classify
from routing_lib.spark.stateful import StepSettings, make_step
from tests.support.step_support import group_state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--history", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--content-min-chars",
        type=int,
        default=4096,
        help="[spark] content_min_chars; -1: no content references (every value inline)",
    )
    parser.add_argument(
        "--fault-interval-ms",
        type=int,
        help="mean time between faults of a group (default: the simulator's)",
    )
    parser.add_argument(
        "--batches",
        type=int,
        default=1,
        help="applying micro-batches (1: one batch parks every event, one applies them all)",
    )
    parser.add_argument("--lines", help="read the records from this file instead")
    parser.add_argument("--save", help="write the generated records to this file")
    args = parser.parse_args()
    if args.lines:
        lines = open(args.lines, "rb").read().splitlines()
    else:
        from bench.backfill_bench import fleet_lines  # (an older commit's bench may lack it)

        options = {}
        if args.fault_interval_ms is not None:
            options["fault_interval_ms"] = args.fault_interval_ms
        lines = list(fleet_lines(args.events, args.groups, args.topics, **options))
    if args.save:
        open(args.save, "wb").write(b"".join(line + b"\n" for line in lines))
    n = len(lines)

    store = None
    if args.content_min_chars >= 0:
        store = ContentSettings(
            tempfile.mkdtemp(prefix="step-bench-content-"), args.content_min_chars
        )
    started = time.process_time()
    classified = [
        classify(line, "archive.jsonl", i, None, 0, store=store) for i, line in enumerate(lines)
    ]
    stage_one = time.process_time() - started
    shuffled = sum(len(c.payload or "") for c in classified)

    by_group: dict[str, list] = {}
    for c in classified:
        by_group.setdefault(c.group_key, []).append((c.event_time, c.source, c.position, c.payload))
    last = max(c.event_time for c in classified)
    step = make_step(
        StepSettings("/nonexistent-checkpoint", DEFAULT_FLAGS, history=args.history, content=store)
    )
    columns = ["event_time", "source", "position", "payload"]

    parked, applied, out_rows, parked_state, final_state = 0.0, 0.0, 0, 0, 0
    for group, events in by_group.items():
        events.sort(key=lambda e: e[0])
        first = events[0][0]
        # batch i brings the events before bounds[i] not brought yet, at the watermark of the
        # batch before (bounds[i - 1]); then one batch without rows at `last - 10 000`
        bounds = [first + (last + 1 - first) * i // args.batches for i in range(args.batches + 1)]
        state = group_state(None, 0)
        brought = 0
        for i in range(args.batches + 1):
            watermark = last - 10_000 if i == args.batches else min(bounds[i], last - 10_000)
            if i == 0:
                watermark = 0
            upto = brought
            if i < args.batches:
                limit = bounds[i + 1]
                while upto < len(events) and events[upto][0] < limit:
                    upto += 1
            frames = [pd.DataFrame(events[brought:upto], columns=columns)] if upto > brought else []
            brought = upto
            state = group_state(tuple(state.get) if state.exists else None, watermark)
            started = time.process_time()
            out = list(step((group,), iter(frames), state))
            spent = time.process_time() - started
            if i == 0:
                parked += spent
                parked_state += sum(len(v or "") for v in state.get) if state.exists else 0
            else:
                applied += spent
                out_rows += sum(len(f) for f in out)
        final_state += sum(len(v or "") for v in state.get) if state.exists else 0
    print(f"events: {n} in {len(by_group)} groups, {args.topics} topics per registration")
    print(f"stage one (classify): {1e6 * stage_one / n:.1f} us/event")
    print(f"step, parking batch: {1e6 * parked / n:.1f} us/event")
    print(
        f"step, applying batch{'es' if args.batches > 1 else ''}: {1e6 * applied / n:.1f}"
        f" us/event ({out_rows} output rows)"
    )
    print(f"bytes to the shuffle (payloads): {shuffled / n:.0f} per event")
    print(f"state while parked: {parked_state / len(by_group):.0f} bytes per group")
    print(f"state after applying: {final_state / len(by_group):.0f} bytes per group")
    print(f"python total: {1e6 * (stage_one + parked + applied) / n:.1f} us/event")


if __name__ == "__main__":
    main()
