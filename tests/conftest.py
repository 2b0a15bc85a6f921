from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from routing_lib.config import load_config
from tests.support import tiers

# One moto server for the session: a fixture imported into two test modules would be two
# fixtures, and the second could not start on the port the first still holds.
from tests.support.s3_support import s3_endpoint  # noqa: F401 - the session fixture

RUN_LAST = ("s3", "cluster")  # start servers of their own (moto, a Spark cluster) and take minutes

# The tests' Spark drivers are short-lived JVMs over small data: C2 re-compiling Spark's and
# Delta's code paths costs them more CPU than its faster code saves (the JIT threads were about
# half of a warm streaming test's CPU). C1 alone: about -30 % CPU on streaming and backfill tests
# (docs/testing.md). spark-submit passes SPARK_SUBMIT_OPTS to the driver JVM it starts: the
# in-process session and the routectl / spark-submit children of the tests.
_GIVEN_OPTS = os.environ.get("SPARK_SUBMIT_OPTS", "")
# a JIT level already given (e.g. -XX:TieredStopAtLevel=4 to measure without this) is kept
_DRIVER_OPTS = [] if "TieredStopAtLevel" in _GIVEN_OPTS else ["-XX:TieredStopAtLevel=1"]
# And the classes a Spark session loads, from the class-data-sharing archive scripts/setup.sh
# builds: ~40 % less CPU to start a session (10.9 -> 6.6 CPU-s). A JVM that cannot use it (another
# JDK, other jars) runs without it; its logging is off so that nothing is added to the output.
_CDS_ARCHIVE = Path(__file__).resolve().parents[1] / ".jars" / "spark-cds.jsa"
_USE_CDS = os.environ.get("ROUTELAKE_SPARK_CDS", "1") != "0"  # 0: without it (to measure it)
if _USE_CDS and _CDS_ARCHIVE.is_file() and " " not in str(_CDS_ARCHIVE):  # split on spaces
    _DRIVER_OPTS += [
        f"-XX:SharedArchiveFile={_CDS_ARCHIVE}",
        "-Xlog:cds=off",
        "-Xlog:cds+dynamic=off",
    ]
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [_GIVEN_OPTS, *_DRIVER_OPTS]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test gets its tier markers (tests/support/tiers.py); tests marked s3 or cluster run
    after all the others, in their collected order."""
    tiers.apply(items)
    items.sort(key=lambda item: any(item.get_closest_marker(m) for m in RUN_LAST))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    """A failed test of a module that defines `failure_logs()` (name -> text: the tails of the
    logs of the processes it started) carries those logs in its report, so that a failure in CI,
    whose machine is gone afterwards, can still be explained."""
    report: pytest.TestReport = yield
    failure_logs = getattr(getattr(item, "module", None), "failure_logs", None)
    if report.failed and failure_logs is not None:
        try:
            report.sections.extend((f"log {name}", text) for name, text in failure_logs().items())
        except Exception as exc:  # the report matters more than its attachments
            report.sections.append(("log", f"could not read the logs: {exc!r}"))
    return report


@pytest.fixture(scope="session")
def config():
    return load_config()


@pytest.fixture(scope="session")
def spark(config):
    from routing_lib.spark.session import build_spark

    session = build_spark(config, "routelake-tests")
    yield session
    session.stop()


@pytest.fixture
def backfill(spark, config, tmp_path):
    """backfill(inputs, **kw) -> projected dump of the resulting warehouse."""
    from routing_lib.core.dump import project
    from routing_lib.jobs.backfill import run_backfill
    from routing_lib.read.warehouse import load_snapshot

    warehouse = tmp_path / "warehouse"

    def run(inputs, **kwargs) -> dict:
        run_backfill(config, [str(p) for p in inputs], str(warehouse), spark=spark, **kwargs)
        return project(load_snapshot(warehouse).dump())

    run.warehouse = warehouse
    return run


@pytest.fixture(scope="session")
def kafka_bootstrap(config) -> Iterator[str]:
    """The local broker of conf/routelake.toml: reused if running, else started (and stopped
    at the end)."""
    from routelake_dev import kafka_local

    result = kafka_local.start(config.kafka)
    try:
        yield config.kafka.bootstrap_servers
    finally:
        if result.started:
            kafka_local.stop(config.kafka)


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    """A fresh Kafka topic (one partition: read order = produce order), deleted afterwards."""
    from kafka import KafkaAdminClient

    from routelake_dev import kafka_local

    name = f"routelake-test-{uuid.uuid4().hex[:10]}"
    assert kafka_local.create_topic(kafka_bootstrap, name, partitions=1)
    yield name
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_topics([name])
    finally:
        admin.close()


@pytest.fixture
def job(config, kafka_bootstrap, topic, tmp_path):
    """job(**kafka_overrides) runs `routectl run --available-now` in-process; returns the dump."""
    from routing_lib.core.dump import project
    from routing_lib.jobs.route_state import run_route_state
    from routing_lib.read.warehouse import load_snapshot

    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
    job_config = config.with_overrides(
        "paths", warehouse=str(warehouse), checkpoint=str(checkpoint)
    )

    def run(**kafka) -> dict:
        cfg = job_config.with_overrides(
            "kafka", topic=topic, bootstrap_servers=kafka_bootstrap, **kafka
        )
        run_route_state(cfg, available_now=True, install_signal_handlers=False)
        return project(load_snapshot(warehouse).dump())

    run.warehouse, run.checkpoint, run.topic, run.bootstrap = (
        warehouse,
        checkpoint,
        topic,
        kafka_bootstrap,
    )
    return run
