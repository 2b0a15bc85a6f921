"""The backfill and the streaming job submitted to a Spark standalone cluster (a master and two
1-core workers on this machine, tests/support/spark_cluster.py) with routelake shipped as a
--py-files zip: the executors import it from that zip, and the tables equal a local run's."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from routing_lib.core.dump import project
from routing_lib.core.history import HISTORY_TABLES
from routing_lib.core.tables import PROGRESS
from routing_lib.jobs.backfill import run_backfill
from routing_lib.read.history import load_history
from routing_lib.read.warehouse import load_snapshot
from tests.support.helpers import reference_dump, split_lines, write_files
from tests.support.spark_cluster import ROOT, Cluster, executor_python

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
SEED = 31


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("spark-cluster")
    cluster = Cluster(
        base,
        python=executor_python(base / "executor-python"),
        worker_dirs=[base / "worker-1", base / "worker-2"],
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[list[str], Path]:
    """A seeded random fleet history (faults, role switches, disorder < delay) in two files."""
    from routelake_dev.simulator import generate_history

    events = generate_history(
        SEED,
        brokers=4,
        topics=4,
        duration_ms=12 * 60_000,
        period_ms=30_000,
        start_ms=1_764_000_000_000,
        disorder_ms=3000,
        fault_interval_ms=120_000,
    )
    lines = [json.dumps(event) for event in events]
    folder = tmp_path_factory.mktemp("history")
    write_files(folder, split_lines(lines, 2, random.Random(SEED)))
    return lines, folder


@pytest.fixture(scope="module")
def local_run(history, spark, config, tmp_path_factory) -> tuple[dict, dict]:
    """The reference: the same files backfilled by the in-process local[2] session."""
    lines, folder = history
    warehouse = tmp_path_factory.mktemp("local") / "warehouse"
    run_backfill(config, [str(folder)], str(warehouse), spark=spark, max_files_per_trigger=1)
    dump = project(load_snapshot(warehouse).dump())
    assert dump == reference_dump(lines)  # and the sequential replay
    return dump, _history(warehouse)


def _history(warehouse: Path) -> dict[str, list[str]]:
    tables = load_history(warehouse)
    return {
        t: sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
        for t, rows in tables.items()
    }


def _assert_same_tables(warehouse: Path, local_run: tuple[dict, dict]) -> None:
    dump, history = local_run
    assert project(load_snapshot(warehouse).dump()) == dump
    cluster_history = _history(warehouse)
    for table in HISTORY_TABLES:
        assert cluster_history[table] == history[table], table


def _assert_ran_on_both_workers(cluster: Cluster, app_name: str) -> None:
    app = cluster.finished_app(app_name)
    assert app["state"] == "FINISHED" and app["cores"] == 2
    executors = cluster.executor_dirs(app["id"])
    assert {d.parent.parent for d in executors} == set(cluster.worker_dirs)
    for folder in executors:  # what each executor fetched from the driver
        names = {p.name for p in folder.iterdir()}
        assert cluster.py_files.name in names and "delta-spark_2.13-4.0.1.jar" in names, names


def test_executors_import_routelake_from_the_shipped_zip(cluster):
    done = cluster.submit("deploy/executor_probe.py", "4")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 4
    workers = set()
    for row in rows:
        cwd = Path(row["cwd"])
        workers |= {w for w in cluster.worker_dirs if w in cwd.parents}
        assert row["python"] == str(cluster.python)
        assert Path(row["routing_lib"]) == cwd / cluster.py_files.name / "routing_lib/__init__.py"
        assert ROOT not in Path(row["routing_lib"]).parents
        assert not any("Editable" in finder for finder in row["finders"]), row["finders"]
    assert workers == set(cluster.worker_dirs)  # both executors answered


def test_backfill_on_the_cluster_equals_the_local_backfill(cluster, history, local_run, tmp_path):
    _, folder = history
    warehouse = tmp_path / "warehouse"
    cluster.submit(
        "jobs/backfill.py",
        *("--input", str(folder), "--warehouse", str(warehouse), "--max-files-per-trigger", "1"),
    )
    _assert_same_tables(warehouse, local_run)
    _assert_ran_on_both_workers(cluster, "routelake-backfill")


def test_stream_on_the_cluster_equals_the_local_run(
    cluster, history, local_run, topic, kafka_bootstrap, tmp_path
):
    """Two runs from one checkpoint (half the topic each, several micro-batches per run); the
    second asks for 4 shuffle partitions and gets the checkpoint's 2."""
    from routelake_dev.simulator import make_producer

    lines, _ = history
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
    job = ("--kafka", kafka_bootstrap, "--topic", topic, "--available-now")
    job += ("--warehouse", str(warehouse), "--checkpoint", str(checkpoint))
    job += ("--max-offsets-per-trigger", str(len(lines) // 4 + 1))
    producer = make_producer(kafka_bootstrap)
    try:
        half = len(lines) // 2
        for shuffle_partitions, part in ((2, lines[:half]), (4, lines[half:])):
            for line in part:
                key = json.loads(line).get("brokerName")
                producer.send(topic, key=key and key.encode(), value=line.encode())
            producer.flush()
            cluster.submit("jobs/route_state.py", *job, shuffle_partitions=shuffle_partitions)
    finally:
        producer.close()
    _assert_same_tables(warehouse, local_run)
    _assert_ran_on_both_workers(cluster, "routelake-route_state")
    progress = DeltaTable(str(warehouse / PROGRESS)).to_pyarrow_table().to_pylist()
    assert sum(r["input_rows"] for r in progress) == len(lines) and len(progress) >= 4
    # The state operator keeps the partition count the checkpoint started with.
    state = checkpoint / "state" / "0"
    assert sorted(p.name for p in state.iterdir() if p.name.isdigit()) == ["0", "1"]
    last = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    metadata = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[1])
    assert metadata["conf"]["spark.sql.shuffle.partitions"] == "2"
