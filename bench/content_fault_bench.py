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
from routing_lib.core.step import BatchContext, InputRow, SavedGroup, StepConfig, step_group
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
    args = parser.parse_args()

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
            content=(backend, args.min_chars),
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


if __name__ == "__main__":
    main()
