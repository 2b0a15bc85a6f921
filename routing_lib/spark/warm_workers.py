"""Start a local session's Python workers while the driver still prepares a query.

Spark starts the Python worker daemon when the first Python task runs, and the daemon imports
routelake's worker-side modules (routing_lib/spark/worker_daemon.py, ~0.6 CPU-s) before it
forks a worker: with nothing else to run, both cores wait for it at the start of a backfill's
first stage. The driver meanwhile spends a second or more before that stage starts (creating
the tables, starting the query, planning its first batch), with the cores idle. A job of one
empty pandas task per core, started in a thread first, moves the daemon's start and the
workers' first-task set-up there. The workers are then reused by the query's tasks: the same
kind of Python runner (Arrow, SQL), so the same daemon.

Nothing is computed twice: the job does what the first stage would have done first, and costs
one tiny Spark job. Local masters only: a cluster's executors start their own daemons.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

import pandas as pd
from pyspark.sql import SparkSession

log = logging.getLogger("routelake.warm_workers")

_SCHEMA = "id LONG"


def no_rows(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The warm-up's task: reads its input, yields nothing."""
    for _ in frames:
        pass
    return iter(())


def start_python_workers(spark: SparkSession) -> threading.Thread | None:
    """Run the warm-up job in a daemon thread (joined by `finish`); None for a cluster."""
    context = spark.sparkContext
    if not (context.master or "").startswith("local"):
        return None
    cores = context.defaultParallelism
    job = spark.range(0, cores, 1, cores).mapInPandas(no_rows, _SCHEMA)

    def run() -> None:
        try:
            job.collect()
        except Exception as exc:  # only a head start: the query starts the workers anyway
            log.debug("starting the Python workers ahead of the query failed: %r", exc)

    thread = threading.Thread(target=run, name="routelake-warm-workers", daemon=True)
    thread.start()
    return thread


def finish(thread: threading.Thread | None) -> None:
    """Wait for the warm-up job (it ended long before any query of real input does)."""
    if thread is not None:
        thread.join()
