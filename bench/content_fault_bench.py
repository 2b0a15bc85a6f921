"""Bytes and files the content store gains per fault of one large broker group, without Spark.

    .venv/bin/python -m bench.content_fault_bench --topics 10000 --cycles 3

One group registers `--topics` topics, then goes through `--cycles` rounds of: an expiry (its
heartbeats stop), a return with the same topic table (a new dataVersion, as after a restart),
a one-topic change (a topic added, new dataVersion), a return to the original table, a perm
change of the middle topic and its undoing. Each
registration goes through stage one's `externalize` and the real step (`step_group`) with a
content folder, one micro-batch per event, the watermark just past it; after every fault the
bench counts the files and bytes under the folder. Prints one line per fault kind (the mean
over the cycles after the first, whose "return" is the first time the set comes back) and the
store's size at the end last.

    .venv/bin/python -m bench.content_fault_bench --fleet 5 --topics 10000 --duration 600

`--fleet N`: the stress profile's fleet instead (bench/stream_bench.py realtime: the simulator,
a fault per group every `--fault-interval-ms` on average, topic changes 6 in 20), N groups for
`--duration` seconds of event time, through stage one (`classify`) and the step in micro-batches
of `--batch-s` seconds of event time. Prints the content written per fault of the run (every
file is new: nothing is collected) and the store's size at the end last.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from routing_lib.content_files import ContentSettings
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.core.step import (
    BatchContext,
    HeldContent,
    InputRow,
    SavedGroup,
    StepConfig,
    step_group,
)
from routing_lib.core.wire import externalize, pack_event
from schemas import RegisterEvent, parse_event

T0 = 1_764_000_000_000
GROUP = "broker-big"
TIMEOUT_MS = 120_000


def _register(
    names: list[str], at: int, counter: int, perm: dict[str, int] | None = None
) -> dict[str, Any]:
    perm = perm or {}
    return {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "C1",
        "brokerAddr": "10.0.0.1:10911",
        "brokerName": GROUP,
        "brokerId": 0,
        "haServerAddr": "10.0.0.1:10912",
        "heartbeatTimeoutMillis": TIMEOUT_MS,
        "dataVersion": {"stateVersion": 0, "timestamp": at, "counter": counter},
        "topicConfigTable": {
            n: {"topicName": n, "readQueueNums": 8, "writeQueueNums": 8, "perm": perm.get(n, 6)}
            for n in names
        },
    }


def _store_size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--min-chars", type=int, default=4096, help="[spark] content_min_chars")
    parser.add_argument("--fleet", type=int, default=0, help="groups of a simulated fleet")
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--fault-interval-ms", type=int, default=20_000)
    parser.add_argument("--batch-s", type=float, default=5.0)
    parser.add_argument("--warmup-s", type=float, default=30.0, help="first tables: not counted")
    args = parser.parse_args()
    if args.fleet:
        fleet_run(args)
        return

    folder = Path(tempfile.mkdtemp(prefix="content-fault-bench-"))
    settings = ContentSettings(str(folder), args.min_chars)
    backend = settings.backend()
    config = StepConfig(DEFAULT_FLAGS)
    saved: SavedGroup | None = None
    position, published = 0, T0 - 1

    def step(record: dict[str, Any] | None, watermark: int) -> None:
        nonlocal saved, position, published
        rows = []
        if record is not None:
            event = parse_event(json.dumps(record))
            assert isinstance(event, RegisterEvent)
            packed = externalize(pack_event(event), backend, 1)
            rows.append(InputRow(record["eventTime"], ("bench", position), packed))
            position += 1
        result = step_group(
            GROUP,
            saved,
            rows,
            BatchContext(watermark, published),
            config,
            content=HeldContent(backend, args.min_chars),
        )
        saved, published = result.state, watermark

    original = [f"topic-{i:05d}" for i in range(args.topics)]
    changed = [*original, "topic-added"]
    at, counter = T0, 1
    step(_register(original, at, counter), at + 1)
    written: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def fault(kind: str, names: list[str] | None, perm: dict[str, int] | None = None) -> None:
        nonlocal at, counter
        files, size = _store_size(folder)
        if names is None:  # an expiry: no event, the watermark passes the deadline
            at += TIMEOUT_MS + 1_000
            step(None, at)
        else:
            at, counter = at + 30_000, counter + 1
            step(_register(names, at, counter, perm), at + 1)
        files_after, size_after = _store_size(folder)
        written[kind].append((files_after - files, size_after - size))

    for _ in range(args.cycles):
        fault("expiry", None)
        fault("return, same topic set", original)
        fault("one topic added", changed)
        fault("back to the set before", original)
        fault("one topic's perm changed", original, {original[len(original) // 2]: 4})
        fault("perm back", original)

    for kind, figures in written.items():
        later = figures[1:] or figures
        files = sum(f for f, _ in later) / len(later)
        size = sum(b for _, b in later) / len(later)
        print(
            f"{kind}: first {figures[0][0]} files, {figures[0][1] / 1024:.1f} KiB; "
            f"then {files:.1f} files, {size / 1024:.1f} KiB per fault"
        )
    files, size = _store_size(folder)
    print(f"store at the end: {files} files, {size / 1024:.1f} KiB ({args.topics} topics)")


def fleet_run(args: argparse.Namespace) -> None:
    from routelake_dev.simulator import EventEncoder
    from routelake_dev.simulator.generation import FleetSimulator
    from routing_lib.ingest import classify

    folder = Path(tempfile.mkdtemp(prefix="content-fault-bench-"))
    settings = ContentSettings(str(folder), args.min_chars)
    backend = settings.backend()
    config = StepConfig(DEFAULT_FLAGS)
    simulator = FleetSimulator(
        "content-fault-bench", args.fleet, args.topics, fault_interval_ms=args.fault_interval_ms
    )
    end = T0 + int(args.duration * 1000)
    encode = EventEncoder()
    batch_ms = int(args.batch_s * 1000)
    saved: dict[str, SavedGroup | None] = {}
    pending: dict[str, list[InputRow]] = defaultdict(list)
    published, batch_end, position, registrations = T0 - 1, simulator.start_ms + batch_ms, 0, 0

    def run_batch(watermark: int) -> None:
        nonlocal published
        for group in sorted(set(pending) | set(saved)):
            result = step_group(
                group,
                saved.get(group),
                pending.pop(group, []),
                BatchContext(watermark, published),
                config,
                content=HeldContent(backend, args.min_chars),
            )
            saved[group] = result.state
        published = watermark

    warm_end = simulator.start_ms + int(args.warmup_s * 1000)
    warm: tuple[int, int] | None = None  # the store after the warm-up (every first table)
    for event in simulator.events(end):
        if event["eventTime"] >= batch_end:
            run_batch(batch_end - 1)
            batch_end += batch_ms
            if warm is None and batch_end - batch_ms >= warm_end:
                warm, warm_end = _store_size(folder), batch_end - batch_ms
        registrations += event["eventType"] == "REGISTER"
        line = encode(event)
        classified = classify(line, "bench", position, None, 0, store=settings)
        position += 1
        pending[classified.group_key].append(
            InputRow(
                classified.event_time,
                (classified.source, classified.position),
                classified.payload or "",
            )
        )
    run_batch(batch_end - 1)
    kinds: dict[str, int] = defaultdict(int)
    counted = [f for f in simulator.faults if f.time >= warm_end]
    for fault in counted:
        kinds[fault.kind] += 1
    files, size = _store_size(folder)
    warm_files, warm_size = warm or (0, 0)
    print(
        f"fleet: {args.fleet} groups x {args.topics} topics, {args.duration:g} s, {position} events"
    )
    print(f"after the warm-up ({warm_files} files, {warm_size / 1024:.0f} KiB: the first tables):")
    print(f"  faults: {len(counted)} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})")
    print(f"  registrations in the whole run: {registrations}")
    print(
        f"  content written: {files - warm_files} files, {(size - warm_size) / 1024:.0f} KiB, "
        f"{(size - warm_size) / max(len(counted), 1) / 1024:.1f} KiB per fault"
    )
    print(f"store at the end: {files} files, {size / 1024 / 1024:.2f} MiB")


if __name__ == "__main__":
    main()
