"""The local Kafka broker, the simulator's producer and produce_files, end to end.

Starts the broker of conf/routelake.toml unless one is already running (then it is reused and
left running); stops it at the end only if this session started it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest

from routelake_dev import kafka_local
from routelake_dev.simulator import (
    DEFAULT_START_MS,
    EventEncoder,
    generate_history,
    produce_files,
    simulate,
)
from routing_lib.collector.publisher import MAX_MESSAGE_BYTES

pytestmark = pytest.mark.kafka

Message = tuple[int, bytes | None, bytes]  # partition, key, value


def consume(bootstrap: str, topic: str, count: int, timeout_s: float = 30.0) -> list[Message]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        fetch_max_bytes=MAX_MESSAGE_BYTES,
    )
    try:
        numbers = sorted(consumer.partitions_for_topic(topic))
        partitions = [TopicPartition(topic, p) for p in numbers]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                out.extend((tp.partition, r.key, r.value) for r in records)
        return out
    finally:
        consumer.close()


def test_start_is_idempotent_and_status_reports_it(config, kafka_bootstrap: str) -> None:
    again = kafka_local.start(config.kafka)
    assert not again.started
    status = kafka_local.status(config.kafka)
    assert status.reachable
    assert status.running == (again.pid is not None)


def test_topic_exists_with_partitions(kafka_bootstrap: str, topic: str) -> None:
    assert kafka_local.topic_partitions(kafka_bootstrap, topic) == 1
    assert not kafka_local.create_topic(kafka_bootstrap, topic, partitions=1)
    wide = topic + "-wide"
    assert kafka_local.create_topic(kafka_bootstrap, wide, partitions=3)
    assert kafka_local.topic_partitions(kafka_bootstrap, wide) == 3


def test_produce_files_sends_lines_as_they_are(kafka_bootstrap: str, topic: str, tmp_path) -> None:
    register = next(e for e in generate_history(1, 1, 3, 30_000) if e["eventType"] == "REGISTER")
    heartbeat = {
        "eventType": "HEARTBEAT",
        "eventTime": DEFAULT_START_MS,
        "clusterName": "c",
        "brokerAddr": "10.0.0.9:10911",
        "brokerName": "broker-b",
        "brokerId": 0,
    }
    malformed = b'{"brokerName":"broker-c", oops'
    lines = [EventEncoder()(register), json.dumps(heartbeat).encode(), malformed]
    path = tmp_path / "three.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert produce_files(kafka_bootstrap, topic, [path]) == 3
    got = consume(kafka_bootstrap, topic, 3)
    assert {value: key for _, key, value in got} == {
        lines[0]: register["brokerName"].encode(),
        lines[1]: b"broker-b",
        malformed: None,
    }


def test_simulate_produces_the_generated_history(kafka_bootstrap: str, topic: str) -> None:
    stats = simulate(
        kafka_bootstrap,
        topic,
        3,
        4,
        30_000,
        21,
        False,
        90,
        None,
        start_ms=DEFAULT_START_MS,
        disorder_ms=2000,
        progress_s=None,
    )
    expected = generate_history(21, 3, 4, 90_000, disorder_ms=2000)
    assert stats.events == len(expected) > 3
    got = consume(kafka_bootstrap, topic, len(expected))
    assert len(got) == len(expected)
    encode = EventEncoder()
    # keyed by brokerName: one partition per group, in arrival order
    want: dict[bytes, list[bytes]] = defaultdict(list)
    for event in expected:
        want[event["brokerName"].encode()].append(encode(event))
    have: dict[bytes | None, list[bytes]] = defaultdict(list)
    partition_of: dict[bytes | None, set[int]] = defaultdict(set)
    for partition, key, value in sorted(got, key=lambda m: m[0]):
        have[key].append(value)
        partition_of[key].add(partition)
    assert have == want
    assert all(len(p) == 1 for p in partition_of.values())


def test_twenty_thousand_topic_registration_round_trips(
    kafka_bootstrap: str, topic: str, tmp_path
) -> None:
    events = generate_history(2, 1, 20_000, 30_000)
    register = next(e for e in events if e["eventType"] == "REGISTER")
    raw = EventEncoder()(register)
    assert len(raw) > 2_000_000  # far above Kafka's 1 MB defaults
    path = tmp_path / "big.jsonl"
    path.write_bytes(raw + b"\n")
    assert produce_files(kafka_bootstrap, topic, [path]) == 1
    [(_, key, value)] = consume(kafka_bootstrap, topic, 1)
    assert key == register["brokerName"].encode() and value == raw
