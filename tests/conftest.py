from __future__ import annotations

import pytest

from routing_lib.config import load_config


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
    from routing_lib.backfill import run_backfill
    from routing_lib.core.dump import project
    from routing_lib.read.warehouse import load_snapshot

    warehouse = tmp_path / "warehouse"

    def run(inputs, **kwargs) -> dict:
        run_backfill(config, [str(p) for p in inputs], str(warehouse), spark=spark, **kwargs)
        return project(load_snapshot(warehouse).dump())

    run.warehouse = warehouse
    return run
