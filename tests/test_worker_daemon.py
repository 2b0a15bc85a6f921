"""The local session's Python workers fork from routelake's worker daemon
(routing_lib/spark/worker_daemon.py), which imported the functions' modules before the fork."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from routing_lib.config import load_config
from routing_lib.spark.session import WORKER_DAEMON
from routing_lib.spark.warm_workers import finish, start_python_workers
from routing_lib.spark.worker_daemon import installed_copies

pytestmark = pytest.mark.spark


def test_workers_fork_from_the_daemon_that_imported_routelake(spark):
    def parent_and_modules(_):
        # defined here, so it is pickled by value and imports nothing of routelake itself
        import os
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as stream:
            parent = stream.read().split(b"\0")
        yield (
            [part.decode() for part in parent if part],
            "routing_lib.spark.stateful" in sys.modules and "pandas" in sys.modules,
            sys.modules["pyspark"].__file__,
        )

    rows = spark.sparkContext.parallelize(range(4), 2).mapPartitions(parent_and_modules).collect()
    assert len(rows) == 2
    for parent, loaded, pyspark_file in rows:
        assert parent[1:3] == ["-m", WORKER_DAEMON], parent
        assert loaded
        # the installed package (compiled), not the copy in pyspark.zip Spark puts first
        assert ".zip" not in pyspark_file, pyspark_file


def _fake_pyspark(site: Path) -> Path:
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    return lib


def test_the_archives_bundled_with_an_importable_pyspark_are_its_copies(tmp_path):
    site = tmp_path / "site-packages"
    lib = _fake_pyspark(site)
    archives = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    path = [*archives, "/somewhere/else", str(site)]
    assert installed_copies(path) == archives
    # the package is not on the path: the archives are the only pyspark there is
    assert installed_copies([*archives, "/somewhere/else"]) == []
    # an archive of another SPARK_HOME, or another archive in the folder, stays where it is
    other = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"
    assert installed_copies([str(other), str(lib / "extra.zip"), str(site)]) == []


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def test_warmed_workers_run_the_next_pandas_tasks(spark):
    """The warm-up job forks the workers that the query's Arrow tasks then run in: started
    before the next job, none forked for it (a daemon of another kind would fork anew)."""

    def pid_and_start(frames):
        # defined here, so it is pickled by value
        import os

        import pandas as pd

        for _ in frames:
            pass
        with open(f"/proc/{os.getpid()}/stat") as stream:
            started = int(stream.read().rsplit(")", 1)[1].split()[19])  # ticks after boot
        yield pd.DataFrame({"pid": [os.getpid()], "started": [started]})

    finish(start_python_workers(spark))
    before = _uptime_ticks()
    time.sleep(0.05)
    cores = spark.sparkContext.defaultParallelism
    rows = (
        spark.range(0, cores, 1, cores)
        .mapInPandas(pid_and_start, "pid LONG, started LONG")
        .collect()
    )
    assert len(rows) == cores
    assert all(row.started <= before for row in rows), (rows, before)


def test_a_cluster_session_starts_no_workers_ahead():
    class Context:
        master = "spark://master:7077"

    class Session:
        sparkContext = Context()

    assert start_python_workers(Session()) is None  # type: ignore[arg-type]


def test_a_cluster_session_keeps_pysparks_daemon():
    """On a cluster the package may come as a --py-files zip the daemon could not import."""
    from routing_lib.spark.session import daemon_conf

    local = load_config().spark.master
    assert local.startswith("local")
    assert daemon_conf(local) == {"spark.python.daemon.module": WORKER_DAEMON}
    assert daemon_conf("") == {}
    assert daemon_conf("spark://master:7077") == {}
