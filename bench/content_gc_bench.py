"""The content store's size over a long run with topic changes, collected: after 1 run and
after N runs of the same length it should be about the same.

    .venv/bin/python -m bench.content_gc_bench --brokers 8 --topics 2000 --run-s 900 --runs 3

--runs runs of --run-s seconds of event time, one after the other, each a simulated fleet
(routelake_dev.simulator: REGISTER every 30 s with the whole topic table, HEARTBEATs between,
a fault per broker group about every --fault-interval-ms: crashes, restarts, role switches and
topic changes, each a registration with a new dataVersion) written as --files-per-run archive
files. Each run is a backfill into the same warehouse and checkpoint, one micro-batch per file,
every topic table and large state value a content file (content_min_chars 0). After each run
the collector runs as `routectl housekeeping --content` does (content_gc.collect_content, grace
--grace-s, Spark keeping --retain state versions).

A run stands for --run-s seconds of wall time, as a live job's would: before the collection
every content file's date is moved back by --run-s. So that no Python worker trusts a file it
wrote "a moment ago" (its freshness window is wall time), each run has a new Spark context.
What the collection keeps is then the files the retained state versions name; a live job keeps
the files written in its last grace period besides.

Prints, per run, the bytes and files ever written (the store without a collector) and the
store after the collection; last, the store after run 1 and after the last run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from itertools import groupby
from pathlib import Path

from bench.backfill_bench import HEARTBEATS_PER_PERIOD, PERIOD_MS, SEED
from routelake_dev.simulator import DEFAULT_START_MS, EventEncoder, iter_history


def _files(content: Path) -> dict[str, int]:
    """Content file name -> size (temporary and tombstone files left out)."""
    return {
        p.name: p.stat().st_size
        for p in content.glob("*/*")
        if p.is_file() and not p.name.startswith(".")
    }


def _write_runs(args: argparse.Namespace, inputs: Path) -> list[list[Path]]:
    """--runs runs of --run-s of event time, one after the other, --files-per-run files each.

    Each run is a fresh simulated fleet history (seed bench-N, the same broker and topic
    names), so every run has the same shape: the simulator's fleet thins out over a long
    history (nodes it takes down do not all come back), which would leave later runs with
    fewer groups and fewer faults."""
    encode = EventEncoder()
    run_ms = int(args.run_s * 1000)
    slice_ms = run_ms // args.files_per_run
    runs: list[list[Path]] = []
    for number in range(args.runs):
        start = DEFAULT_START_MS + number * run_ms
        history = iter_history(
            f"{SEED}-{number}",
            args.brokers,
            args.topics,
            run_ms,
            PERIOD_MS,
            start,
            heartbeats_per_period=HEARTBEATS_PER_PERIOD,
            fault_interval_ms=args.fault_interval_ms,
        )
        paths: list[Path] = []
        for index, events in groupby(history, key=lambda e: (e["eventTime"] - start) // slice_ms):
            path = inputs / f"part-{number:03d}-{index:04d}.jsonl"
            with path.open("ab") as out:
                out.writelines(encode(e) + b"\n" for e in events)
            if path not in paths:
                paths.append(path)
        runs.append(paths)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=8, help="broker groups")
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--run-s", type=float, default=900, help="event time of one run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files-per-run", type=int, default=20, help="micro-batches per run")
    parser.add_argument("--fault-interval-ms", type=int, default=20_000)
    parser.add_argument("--grace-s", type=float, default=600)
    parser.add_argument("--retain", type=int, default=10, help="minBatchesToRetain")
    parser.add_argument("--workdir", default=".work/bench-content-gc")
    args = parser.parse_args()

    from routing_lib.config import load_config
    from routing_lib.content_gc import collect_content
    from routing_lib.jobs.backfill import run_backfill
    from routing_lib.spark.session import build_spark

    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    inputs, staged = work / "all-input", work / "input"
    inputs.mkdir(parents=True)
    staged.mkdir()
    runs = _write_runs(args, inputs)
    warehouse, checkpoint = work / "warehouse", work / "checkpoint"
    content = checkpoint / "content"
    config = load_config().with_overrides("spark", content_min_chars=0)

    written: dict[str, int] = {}
    after: list[tuple[int, int]] = []
    for number, files in enumerate(runs, start=1):
        for path in files:  # the run's archive files appear in the watched folder
            shutil.copy(path, staged / path.name)
        spark = build_spark(config, "routelake-bench")
        spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(args.retain))
        started = time.monotonic()
        run_backfill(
            config,
            [str(staged)],
            str(warehouse),
            checkpoint=str(checkpoint),
            max_files_per_trigger=1,
            spark=spark,
        )
        backfill_s = time.monotonic() - started
        before = _files(content)
        written.update(before)
        for entry in content.glob("*/*"):  # the run's wall time passes
            mtime = entry.stat().st_mtime - args.run_s
            os.utime(entry, (mtime, mtime))
        report = collect_content(spark, str(checkpoint), args.grace_s)
        spark.stop()
        kept = _files(content)
        after.append((len(kept), sum(kept.values())))
        print(
            f"run {number}: {len(files)} files in {backfill_s:.0f} s; written so far "
            f"{len(written)} files {sum(written.values()) / 1e6:.1f} MB; store before "
            f"collecting {len(before)} files {sum(before.values()) / 1e6:.1f} MB, after "
            f"{after[-1][0]} files {after[-1][1] / 1e6:.1f} MB ({report.marked} marked, "
            f"{report.deleted_files} deleted)",
            flush=True,
        )
    first, final = after[0], after[-1]
    print(
        f"content store after 1 run: {first[0]} files, {first[1] / 1e6:.2f} MB; after "
        f"{len(after)} runs: {final[0]} files, {final[1] / 1e6:.2f} MB (written in all: "
        f"{len(written)} files, {sum(written.values()) / 1e6:.1f} MB)"
    )


if __name__ == "__main__":
    main()
