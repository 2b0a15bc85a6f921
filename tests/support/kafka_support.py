"""Shared by the Kafka tests: producing lines keyed like the collector does, reading tables."""

from __future__ import annotations

import json
from pathlib import Path

from deltalake import DeltaTable

from routelake_dev.simulator import make_producer
from tests.support.helpers import fixture_lines


def produce(
    bootstrap: str, topic: str, values: list[bytes], keys: list[bytes | None] | None = None
) -> None:
    producer = make_producer(bootstrap)
    try:
        for i, value in enumerate(values):
            producer.send(topic, key=keys[i] if keys else _key(value), value=value)
        producer.flush()
    finally:
        producer.close()


def _key(value: bytes) -> bytes | None:
    try:
        return json.loads(value)["brokerName"].encode()
    except (ValueError, KeyError, TypeError):
        return None


def rows(warehouse: Path, table: str) -> list[dict]:
    return DeltaTable(str(warehouse / table)).to_pyarrow_table().to_pylist()


def lines_of(name: str) -> list[bytes]:
    return [line.encode() for line in fixture_lines(name)]
