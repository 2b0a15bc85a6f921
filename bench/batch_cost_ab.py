"""Per-batch fixed cost (README, issue 8):

    .venv/bin/python -m bench.batch_cost_ab 1200

Per-batch fixed cost: a backfill with one small file per micro-batch, phases from the
writer's BatchReport. Alternates Spark settings to compare them in one process."""

import shutil
import statistics
import sys
import time
from pathlib import Path

import routing_lib.spark.pipeline as pipeline
from bench.backfill_bench import fleet_lines
from routing_lib.backfill import run_backfill
from routing_lib.config import load_config
from routing_lib.spark.session import build_spark

work = Path("/work/ab/batchcost")
shutil.rmtree(work, ignore_errors=True)
archive = work / "archive"
archive.mkdir(parents=True)
lines = list(fleet_lines(int(sys.argv[1]) if len(sys.argv) > 1 else 1200, 6, 10))
per_file = 60  # 6 brokers x 10 s of events
for i in range(0, len(lines), per_file):
    (archive / f"part-{i // per_file:04d}.jsonl").write_bytes(
        b"\n".join(lines[i : i + per_file]) + b"\n"
    )
config = load_config()
spark = build_spark(config, "batch-cost")
reports: list = []
pipeline._log_batch = reports.append  # type: ignore[assignment]  # collect, not log
SETTINGS = {
    "base": {
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false",
        "spark.databricks.delta.merge.materializeSource": "auto",
    },
    "tuned": {
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.databricks.delta.merge.materializeSource": "none",
    },
}
for round_ in range(2):
    for name, conf in SETTINGS.items():
        for k, v in conf.items():
            spark.conf.set(k, v)
        reports.clear()
        wh = work / f"wh-{name}-{round_}"
        t = time.monotonic()
        run_backfill(config, [str(archive)], str(wh), spark=spark, max_files_per_trigger=1)
        total = time.monotonic() - t
        rs = reports[3:]  # skip the first batches (table creation, warm-up)
        med = {k: statistics.median(r.phases[k] for r in rs) for k in rs[0].phases}
        print(
            f"{name} round {round_}: {len(reports)} batches in {total:.1f} s, median batch "
            f"{statistics.median(r.seconds for r in rs):.2f} s, phases "
            + ", ".join(f"{k} {v:.2f}" for k, v in med.items()),
            flush=True,
        )
