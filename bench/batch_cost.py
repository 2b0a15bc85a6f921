"""Per-batch fixed cost (it bounds freshness): a backfill of small files, one per micro-batch.

    PYTHONPATH=$PWD .venv/bin/python bench/batch_cost.py [EVENTS]

Each file holds 10 s of a 6-broker x 10-topic fleet (60 events). Prints, as medians over the
batches after the first three (table creation, warm-up): Spark's trigger time per batch
(`triggerExecution`: what a streaming batch costs end to end), and the writer's phases
(`step`: the stateful plan, run by the writer's first action; `tables`: the table commits;
`progress`: the progress row). Two rounds; the second is warm. For a before/after, run it
from a worktree of the older commit as bench/ab_backfill.py describes (the code under test is
whichever tree is first on PYTHONPATH).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from pyspark.sql.streaming import StreamingQueryListener

import routing_lib.spark.pipeline as pipeline
from bench.backfill_bench import fleet_lines
from routing_lib.config import load_config
from routing_lib.jobs.backfill import run_backfill
from routing_lib.spark.session import build_spark

EVENTS_PER_FILE = 60


class _Progress(StreamingQueryListener):
    def __init__(self) -> None:
        self.durations: list[dict[str, int]] = []

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        self.durations.append(json.loads(event.progress.json)["durationMs"])

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 1200
    work = Path("/tmp/routelake-batch-cost")
    shutil.rmtree(work, ignore_errors=True)
    archive = work / "archive"
    archive.mkdir(parents=True)
    lines = list(fleet_lines(events, 6, 10))
    for i in range(0, len(lines), EVENTS_PER_FILE):
        part = b"\n".join(lines[i : i + EVENTS_PER_FILE]) + b"\n"
        (archive / f"part-{i // EVENTS_PER_FILE:04d}.jsonl").write_bytes(part)
    config = load_config()
    spark = build_spark(config, "batch-cost")
    progress = _Progress()
    spark.streams.addListener(progress)
    reports: list = []
    pipeline._log_batch = reports.append  # type: ignore[assignment]  # collect, not log
    for round_ in range(2):
        reports.clear()
        progress.durations.clear()
        started = time.monotonic()
        run_backfill(
            config, [str(archive)], str(work / f"wh-{round_}"), spark=spark, max_files_per_trigger=1
        )
        total = time.monotonic() - started
        time.sleep(1)  # the listener is asynchronous
        measured, triggers = reports[3:], [d["triggerExecution"] for d in progress.durations[3:]]
        phases = {k: statistics.median(r.phases[k] for r in measured) for k in measured[0].phases}
        print(
            f"round {round_}: {len(reports)} batches in {total:.1f} s; median per batch: "
            f"trigger {statistics.median(triggers) / 1000:.2f} s, writer "
            f"{statistics.median(r.seconds for r in measured):.2f} s ("
            + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items())
            + ")",
            flush=True,
        )


if __name__ == "__main__":
    main()
