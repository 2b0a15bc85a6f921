"""The local session's Python workers fork from routelake's worker daemon
(routing_lib/spark/worker_daemon.py), which imported the functions' modules before the fork."""

from __future__ import annotations

import pytest

from routing_lib.config import load_config
from routing_lib.spark.session import WORKER_DAEMON

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
        # the installed package's compiled modules, not Spark's source-only zip
        assert ".zip" not in pyspark_file, pyspark_file


def test_a_cluster_session_keeps_pysparks_daemon():
    """On a cluster the package may come as a --py-files zip the daemon could not import."""
    from routing_lib.spark.session import daemon_conf

    local = load_config().spark.master
    assert local.startswith("local")
    assert daemon_conf(local) == {"spark.python.daemon.module": WORKER_DAEMON}
    assert daemon_conf("") == {}
    assert daemon_conf("spark://master:7077") == {}
