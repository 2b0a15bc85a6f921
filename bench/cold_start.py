"""The cold start of a fleet: the batch that applies every broker's first registration.

    .venv/bin/python -m bench.cold_start --brokers 300 --topics 10000
    .venv/bin/python -m bench.cold_start --brokers 60 --topics 10000   # smaller, repeatable

An archive of the first --seconds of event time of a simulated fleet (routelake_dev.simulator,
the stream bench's fleet: REGISTER every 30 s, HEARTBEATs between, a fault per group every
--fault-interval-ms) is written once under --workdir, then the job's pipeline drains it into
a fresh warehouse and checkpoint with Trigger.AvailableNow (what `routectl backfill` runs).
Batch 0 reads every record and parks it (the watermark is 0); the next batch, with the
watermark at the archive's end minus the delay (10 s), applies the first 30 s: every broker's
first REGISTER of --topics topics, the cold start of `stream_bench realtime`. Each published
batch is printed with its phases (step: the stateful plan; tables: the route and history
commits, with each table's collect and commit; progress) and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from bench.backfill_bench import fleet_lines

WATERMARK_DELAY_S = 10
FILES = 2  # one task per file: both cores read and classify


def archive(workdir: Path, brokers: int, topics: int, seconds: int, fault_ms: int) -> Path:
    """The fleet's first `seconds` of event time as JSON lines, written once."""
    folder = workdir / f"archive-{brokers}x{topics}-{seconds}s-{fault_ms}"
    if (folder / "_done").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    handles = [open(folder / f"part-{i}.jsonl", "wb") for i in range(FILES)]
    lines = fleet_lines(10**9, brokers, topics, fault_interval_ms=fault_ms)
    first: int | None = None
    for written, line in enumerate(lines):
        at = int(line.split(b'"eventTime":', 1)[1].split(b",", 1)[0])
        first = at if first is None else first
        if at - first >= seconds * 1000:
            break
        handles[written % FILES].write(line + b"\n")
    for handle in handles:
        handle.close()
    (folder / "_done").touch()
    return folder


def run(folder: Path, work: Path) -> None:
    from routing_lib.config import load_config
    from routing_lib.core.group_routes import RouteFlags
    from routing_lib.spark.delta_writer import BatchReport
    from routing_lib.spark.pipeline import ContentOptions, JobSettings, start_query
    from routing_lib.spark.session import build_spark
    from routing_lib.spark.sources import archive_stream

    config = load_config()
    shutil.rmtree(work, ignore_errors=True)
    started = time.monotonic()
    spark = build_spark(config, "cold_start")
    settings = JobSettings(
        warehouse=str((work / "warehouse").resolve()),
        checkpoint=str((work / "checkpoint").resolve()),
        watermark_delay_ms=WATERMARK_DELAY_S * 1000,
        flags=RouteFlags(config.routes.delete_topic_with_broker_registration),
        history=config.routes.history,
        content_options=ContentOptions.of(config.spark),
    )
    print(f"spark up in {time.monotonic() - started:.1f} s (load {_load()})", flush=True)

    def published(report: BatchReport) -> None:
        phases = ", ".join(f"{k} {v:.2f}" for k, v in report.phases.items())
        print(
            f"batch {report.batch_id}: {report.seconds:.2f} s ({phases}); load {_load()}; "
            f"input_rows {report.counts.get('input_rows', 0)}, applied "
            f"{report.counts.get('applied', report.counts.get('accepted', 0))}",
            flush=True,
        )
        for name, spent in sorted(
            getattr(report, "table_seconds", {}).items(), key=lambda kv: -kv[1]
        ):
            print(f"    {name}: {spent:.2f} s", flush=True)

    classified = archive_stream(
        spark, [str(folder.resolve())], None, settings.warehouse, None, settings.content
    )
    query = start_query(spark, classified, settings, available_now=True, on_batch=published)
    query.awaitTermination()
    print(f"drained in {time.monotonic() - started:.1f} s (Spark start included)", flush=True)
    spark.stop()


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=300)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=30 + WATERMARK_DELAY_S)
    parser.add_argument("--fault-interval-ms", type=int, default=20_000)
    parser.add_argument("--workdir", default=".work/bench-cold")
    parser.add_argument("--keep", action="store_true", help="keep the warehouse")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    folder = archive(workdir, args.brokers, args.topics, args.seconds, args.fault_interval_ms)
    size = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
    print(f"archive {folder} ({size / 1e6:.0f} MB)", flush=True)
    work = workdir / f"run-{os.getpid()}"
    try:
        run(folder, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
