"""Which Python and which routing_lib do the executors use? Submit it like the jobs:

    deploy/spark-submit.sh --py-files dist/routelake-0.1.0.zip \
        --conf spark.pyspark.python=/opt/routelake-py/bin/python deploy/executor_probe.py [N]

Prints one JSON line per task (N tasks, default 4): the executor's Python, its working
folder, where routing_lib was imported from, and the meta-path finders (an editable install
shows up as one). Nothing here imports routing_lib on the driver.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator

from pyspark.sql import SparkSession


def _probe(_: Iterable[int]) -> Iterator[dict]:
    import os
    import time

    import routing_lib

    time.sleep(0.5)  # keeps a task long enough for the other executor to take the next one
    yield {
        "python": sys.executable,
        "cwd": os.getcwd(),
        "routing_lib": os.path.abspath(routing_lib.__file__),
        "finders": sorted(getattr(f, "__name__", type(f).__name__) for f in sys.meta_path),
    }


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    spark = SparkSession.builder.appName("routelake-executor-probe").getOrCreate()
    try:
        rows = spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(_probe)
        for row in rows.collect():
            print(json.dumps(row, sort_keys=True))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
