"""Backfill throughput vs the naive limit, measured in the same run.

    .venv/bin/python -m bench.backfill_bench --events 1000000 --topics 100

Generates an archive with the fleet simulator (routelake_dev.simulator: every broker
REGISTERs every 30 s with its full topic config, HEARTBEATs every 5 s in between, a fault per
broker group about every 10 min), then times (1) the naive limit: a bare Spark read of the same
files with the full event schema, aggregating something from every field so no column can be
pruned, and (2) `routectl backfill` of the same files into a fresh warehouse. Prints events/s
of both and their ratio.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path

from routelake_dev.simulator import DEFAULT_START_MS, EventEncoder, iter_history

PERIOD_MS = 30_000
HEARTBEATS_PER_PERIOD = 5  # one every 5 s between registrations
SEED = "bench"


def fleet_lines(
    events: int, brokers: int, topics: int, start_ms: int = DEFAULT_START_MS, **options
) -> Iterator[bytes]:
    """The first `events` events of a simulated fleet as JSON lines (`options`: the
    simulator's, e.g. fault_interval_ms)."""
    encode = EventEncoder()
    history = iter_history(
        SEED,
        brokers,
        topics,
        None,
        PERIOD_MS,
        start_ms,
        heartbeats_per_period=HEARTBEATS_PER_PERIOD,
        **options,
    )
    return (encode(event) for event in islice(history, events))


def generate(out: Path, events: int, brokers: int, topics: int, files: int) -> int:
    """Write the archive; returns the number of events written."""
    out.mkdir(parents=True)
    handles = [open(out / f"part-{i:04d}.jsonl", "wb") for i in range(files)]
    written = 0
    for line in fleet_lines(events, brokers, topics):
        handles[written % files].write(line + b"\n")
        written += 1
    for handle in handles:
        handle.close()
    return written


def naive_limit(spark, folder: Path) -> tuple[float, dict]:
    from pyspark.sql import functions as F

    from schemas.spark import event_struct

    started = time.monotonic()
    df = spark.read.schema(event_struct()).json(str(folder))
    perms = F.aggregate(
        F.map_values("topicConfigTable"),
        F.lit(0).cast("long"),
        lambda acc, t: (
            acc
            + t.perm
            + t.readQueueNums
            + t.writeQueueNums
            + t.topicSysFlag
            + F.length(t.topicName)
        ),
    )
    row = df.agg(
        F.count("eventType").alias("events"),
        F.sum("eventTime").alias("t"),
        F.max("clusterName"),
        F.max("brokerAddr"),
        F.max("brokerName"),
        F.sum("brokerId"),
        F.max("haServerAddr"),
        F.sum("dataVersion.counter"),
        F.sum("heartbeatTimeoutMillis"),
        F.sum(F.size("topicConfigTable")).alias("topic_configs"),
        F.sum(perms),
        F.max(F.size("filterServerList")),
        F.count("enableActingMaster"),
        F.max("zoneName"),
    ).collect()[0]
    return time.monotonic() - started, row.asDict()


def timed_backfill(
    config,
    archive: Path,
    warehouse: Path,
    spark,
    count: int,
    label: str,
    on_done: Callable[[], object] | None = None,
) -> float:
    """The backfill's wall seconds; `on_done` is called as it ends, before the check that
    reads the warehouse back (ab_backfill reads its CPU figure there)."""
    from routing_lib.jobs.backfill import run_backfill
    from routing_lib.read.warehouse import load_snapshot

    started = time.monotonic()
    run_backfill(config, [str(archive)], str(warehouse), spark=spark)
    seconds = time.monotonic() - started
    if on_done is not None:
        on_done()
    snapshot = load_snapshot(warehouse)
    print(
        f"backfill ({label}): {seconds:.1f} s, {count / seconds:,.0f} events/s, "
        f"{len(snapshot.tables['broker_live_table'])} live brokers, "
        f"{len(snapshot.tables['topic_queue_table'])} topic routes"
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--brokers", type=int, default=200)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--workdir", default=".work/bench")
    parser.add_argument(
        "--history-off-too",
        action="store_true",
        help="also time the backfill with the history tables off (ratio)",
    )
    args = parser.parse_args()

    from routing_lib.config import load_config
    from routing_lib.spark.session import build_spark

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    archive = work / "archive"
    started = time.monotonic()
    count = generate(archive, args.events, args.brokers, args.topics, args.files)
    size = sum(p.stat().st_size for p in archive.iterdir())
    print(
        f"archive: {count} events, {size / 1e6:.0f} MB, {args.brokers} brokers x "
        f"{args.topics} topics, generated in {time.monotonic() - started:.0f} s"
    )

    config = load_config()
    spark = build_spark(config, "routelake-bench")
    naive_s, row = naive_limit(spark, archive)
    print(
        f"naive limit (bare Spark read, full schema): {naive_s:.1f} s, "
        f"{count / naive_s:,.0f} events/s, {row['topic_configs']} topic configs"
    )

    backfill_s = timed_backfill(config, archive, work / "warehouse", spark, count, "history on")
    print(f"ratio backfill/naive (events/s): {naive_s / backfill_s:.3f}")
    if args.history_off_too:
        off = config.with_overrides("routes", history=False)
        off_s = timed_backfill(
            off, archive, work / "warehouse-nohistory", spark, count, "history off"
        )
        print(f"history on / off (time): {backfill_s / off_s:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
