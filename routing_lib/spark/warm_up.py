"""Start the Python workers while the streaming job sets up, not in its first micro-batch.

Spark starts an executor's Python worker daemon when the first task with a Python function
runs, and forks the workers from it. The daemon's start (routing_lib/spark/worker_daemon.py
imports pyspark, pandas, pyarrow, pydantic and routelake's worker modules: ~1 CPU-s) was on the
path of the first micro-batch's first task, after the query had started. Meanwhile the job's
set-up (the Delta tables, the checkpoint's lead file, the query's start and its first offsets)
leaves the executors idle. So the job runs one small job of pandas functions first, on a thread
of its own: the daemon starts and forks its workers then, and the first micro-batch's tasks
take the idle workers (Spark reuses a worker across tasks).

It must be a pandas function, not a plain RDD one: Spark keys its daemons by the runner's
environment, and an RDD's Python function got a daemon of its own (measured: the later
mapInPandas job started a second daemon), while mapInPandas and applyInPandasWithState share one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator

import pandas as pd
from pyspark.sql import SparkSession

log = logging.getLogger("routelake.warm_up")


def _worker_pid(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for _ in frames:
        pass
    yield pd.DataFrame({"pid": [os.getpid()]})


class WorkerWarmUp:
    """One pandas task per executor core, on a thread; `pids` are the workers that ran them."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.pids: list[int] = []
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="python-warm-up")

    def start(self) -> WorkerWarmUp:
        self._thread.start()
        return self

    def _run(self) -> None:
        tasks = max(1, self.spark.sparkContext.defaultParallelism)
        try:
            rows = (
                self.spark.range(0, tasks, 1, tasks).mapInPandas(_worker_pid, "pid long").collect()
            )
            self.pids = [row.pid for row in rows]
        except Exception as exc:  # the job goes on; its first batch starts the workers then
            self.failure = exc
            log.info("warming the Python workers failed (the first batch starts them): %r", exc)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Whether the warm-up finished (and ran) within the time."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive() and self.failure is None
