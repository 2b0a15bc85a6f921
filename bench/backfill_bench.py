"""Backfill throughput vs the naive limit, measured in the same run.

    .venv/bin/python bench/backfill_bench.py --events 1000000 --topics 100

Generates an archive of a steady fleet (every broker REGISTERs every 30 s with its full topic
config, lightweight HEARTBEATs every 5 s in between, a dataVersion bump every 10 min), then
times (1) the naive limit: a bare Spark read of the same files with the full event schema,
aggregating something from every field so no column can be pruned, and (2) `routectl backfill`
of the same files into a fresh warehouse. Prints events/s of both and their ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

REGISTER_EVERY_MS = 30_000
HEARTBEAT_EVERY_MS = 5_000
VERSION_BUMP_EVERY_MS = 600_000
START_MS = 1_764_000_000_000


def topic_table(broker: int, topics: int, counter: int) -> dict:
    return {
        f"Topic{t:04d}": {
            "topicName": f"Topic{t:04d}",
            "readQueueNums": 8,
            "writeQueueNums": 8,
            "perm": 6 if counter % 2 else 7,
            "topicSysFlag": 0,
        }
        for t in range(topics)
    }


def generate(out: Path, events: int, brokers: int, topics: int, files: int) -> int:
    """Write the archive; returns the number of events written."""
    per_broker_cycle = REGISTER_EVERY_MS // HEARTBEAT_EVERY_MS
    cycles = max(1, events // (brokers * per_broker_cycle))
    out.mkdir(parents=True)
    handles = [open(out / f"part-{i:04d}.jsonl", "w") for i in range(files)]
    written = 0
    tables: dict[tuple[int, int], str] = {}
    for cycle in range(cycles):
        for step in range(per_broker_cycle):
            for broker in range(brokers):
                now = START_MS + cycle * REGISTER_EVERY_MS + step * HEARTBEAT_EVERY_MS + broker
                base = {
                    "eventTime": now,
                    "clusterName": f"cluster-{broker % 4}",
                    "brokerAddr": f"10.{broker // 250}.{broker % 250}.1:10911",
                    "brokerName": f"broker-{broker:05d}",
                    "brokerId": 0,
                }
                if step == 0:
                    counter = 1 + (cycle * REGISTER_EVERY_MS) // VERSION_BUMP_EVERY_MS
                    key = (broker, counter)
                    if key not in tables:
                        tables[key] = json.dumps(topic_table(broker, topics, counter))
                    line = json.dumps(
                        {
                            "eventType": "REGISTER",
                            **base,
                            "haServerAddr": base["brokerAddr"][:-1] + "2",
                            "dataVersion": {
                                "stateVersion": 0,
                                "timestamp": START_MS,
                                "counter": counter,
                            },
                        }
                    )
                    line = line[:-1] + ', "topicConfigTable": ' + tables[key] + "}"
                else:
                    line = json.dumps({"eventType": "HEARTBEAT", **base})
                handles[written % files].write(line + "\n")
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


def timed_backfill(config, archive: Path, warehouse: Path, spark, count: int, label: str) -> float:
    from routing_lib.backfill import run_backfill
    from routing_lib.read.warehouse import load_snapshot

    started = time.monotonic()
    run_backfill(config, [str(archive)], str(warehouse), spark=spark)
    seconds = time.monotonic() - started
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
