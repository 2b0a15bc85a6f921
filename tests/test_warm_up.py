"""The streaming job's warm-up starts the Python workers that its first micro-batch's pandas
tasks then take (routing_lib/spark/warm_up.py)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import pandas as pd
import pytest

from routing_lib.spark.warm_up import WorkerWarmUp

pytestmark = pytest.mark.spark


def _pids(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for _ in frames:
        pass
    yield pd.DataFrame({"pid": [os.getpid()]})


def test_the_next_pandas_job_runs_in_a_warmed_worker(spark):
    warm = WorkerWarmUp(spark).start()
    assert warm.wait(300), warm.failure
    assert len(warm.pids) == spark.sparkContext.defaultParallelism
    tasks = spark.sparkContext.defaultParallelism
    after = [
        row.pid for row in spark.range(0, tasks, 1, tasks).mapInPandas(_pids, "pid long").collect()
    ]
    assert set(after) & set(warm.pids), (after, warm.pids)
