"""The console bench's warehouse, built by the real job: the fleet simulator's events written
as .jsonl.gz archive files, loaded by `routectl backfill` (Spark, Delta).

    .venv/bin/python -m bench.console_warehouse [--warehouse /work/bench-data/console-300x10k]

The fleet registers the way RocketMQ 5 brokers can be run at this size: a full topic table
with each registration (every `PERIOD_MS`) and small heartbeats in between (every 10 s), so
the archive holds each broker's 10 000-topic table a few times an hour instead of every 30 s
(tens of GB); re-sent tables are unchanged and the job stores each content once. Faults (one
per group about every `FAULT_INTERVAL_MS`) give time travel something to show: brokers that
expire and come back, graceful shutdowns, role switches, topic changes.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from routelake_dev.simulator import DEFAULT_START_MS, EventEncoder, iter_history

DEFAULT_WAREHOUSE = Path("/work/bench-data/console-300x10k")
SEED = "console-bench"
PERIOD_MS = 20 * 60_000  # a full registration every 20 min
HEARTBEAT_MS = 10_000
FAULT_INTERVAL_MS = 20 * 60_000
ARCHIVE_MINUTES = 5  # event time per archive file
FILES_PER_TRIGGER = 3  # micro-batches of 15 min of event time: the warehouse has versions


@dataclass(frozen=True)
class Fleet:
    brokers: int = 300
    topics: int = 10_000
    minutes: int = 65


def routectl(*args: str) -> None:
    """Run a routectl command of this interpreter's environment, its output passed through."""
    command = [str(Path(sys.executable).with_name("routectl")), *args]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def write_archive(archive: Path, fleet: Fleet) -> int:
    """The fleet's history as .jsonl.gz files of ARCHIVE_MINUTES of event time each (what
    `routectl simulate --archive` writes, at gzip level 1: level 9 took ~1 MB/s of JSON here,
    and a registration is ~1 MB); returns the number of events."""
    archive.mkdir(parents=True)
    encode = EventEncoder()
    window_ms = ARCHIVE_MINUTES * 60_000
    files: dict[int, gzip.GzipFile] = {}
    count = 0
    history = iter_history(
        SEED,
        fleet.brokers,
        fleet.topics,
        fleet.minutes * 60_000,
        PERIOD_MS,
        DEFAULT_START_MS,
        heartbeats_per_period=PERIOD_MS // HEARTBEAT_MS - 1,
        fault_interval_ms=FAULT_INTERVAL_MS,
    )
    for event in history:
        window = (event["eventTime"] - DEFAULT_START_MS) // window_ms
        out = files.get(window)
        if out is None:
            for old in [w for w in files if w < window]:  # event time only moves on
                files.pop(old).close()
            name = f"events-{window:03d}.jsonl.gz"
            out = files[window] = gzip.GzipFile(archive / name, "wb", compresslevel=1, mtime=0)
        out.write(encode(event) + b"\n")
        count += 1
    for out in files.values():
        out.close()
    return count


def build(warehouse: Path, fleet: Fleet, keep_archive: bool = False) -> None:
    """Simulate the fleet into an archive next to `warehouse`, backfill it, print the times."""
    archive = warehouse.with_name(warehouse.name + "-archive")
    shutil.rmtree(archive, ignore_errors=True)
    shutil.rmtree(warehouse, ignore_errors=True)
    started = time.monotonic()
    events = write_archive(archive, fleet)
    simulated = time.monotonic() - started
    print(
        f"archive: {events:,} events, {folder_bytes(archive) / 1e6:,.0f} MB gzipped, "
        f"written in {simulated:.0f} s",
        flush=True,
    )
    started = time.monotonic()
    routectl(
        "backfill",
        "--input", str(archive),
        "--warehouse", str(warehouse),
        "--max-files-per-trigger", str(FILES_PER_TRIGGER),
    )  # fmt: skip
    loaded = time.monotonic() - started
    print(
        f"backfill: {loaded:.0f} s; warehouse {folder_bytes(warehouse) / 1e6:,.0f} MB "
        f"(simulate {simulated:.0f} s + backfill {loaded:.0f} s)",
        flush=True,
    )
    if not keep_archive:
        shutil.rmtree(archive)


def is_built(warehouse: Path) -> bool:
    return (warehouse / "route_progress" / "_delta_log").is_dir()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warehouse", type=Path, default=DEFAULT_WAREHOUSE)
    parser.add_argument("--brokers", type=int, default=Fleet.brokers)
    parser.add_argument("--topics", type=int, default=Fleet.topics)
    parser.add_argument("--minutes", type=int, default=Fleet.minutes)
    parser.add_argument("--keep-archive", action="store_true")
    args = parser.parse_args()
    build(args.warehouse, Fleet(args.brokers, args.topics, args.minutes), args.keep_archive)


if __name__ == "__main__":
    main()
