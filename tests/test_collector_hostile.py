"""Hostile input against `routectl collect` (a subprocess on real Kafka), like the lookup's
suite: bad frames, truncated bodies, wrong crc32, unknown codes, oversized frames, a seeded
fuzz of mutated REGISTER_BROKER frames. Each gets an error answer or a closed connection; the
process stays up, logs no traceback, and publishes nothing; a valid request still works."""

from __future__ import annotations

import random
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from routelake_dev import broker_requests, kafka_local
from routing_lib.remoting.frames import SerializeType, encode
from routing_lib.remoting.protocol import RequestCode, ResponseCode
from tests.support.collector_support import start_collector, stop_collector
from tests.support.rocketmq_support import call, events, exchange, exchange_bytes

TOPICS = {f"T{i}": broker_requests.topic_config(f"T{i}", 4) for i in range(20)}
SMALL_LIMITS = """[serve]
request_timeout_s = 1.5
idle_timeout_s = 2.5
max_connections = 64
"""


@dataclass
class Collect:
    proc: subprocess.Popen
    port: int
    log_path: Path
    topic: str

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def collect(kafka_bootstrap, tmp_path_factory) -> Iterator[Collect]:
    root = tmp_path_factory.mktemp("collect")
    topic = f"routelake-test-{uuid.uuid4().hex[:10]}"
    assert kafka_local.create_topic(kafka_bootstrap, topic, partitions=1)
    (root / "conf.toml").write_text(SMALL_LIMITS)
    log_path = root / "collect.log"
    proc, port = start_collector(
        kafka_bootstrap, topic, log_path, "--config", str(root / "conf.toml")
    )
    try:
        yield Collect(proc, port, log_path, topic)
    finally:
        stop_collector(proc)


@pytest.fixture(autouse=True)
def nothing_published_and_healthy(collect: Collect, kafka_bootstrap) -> Iterator[None]:
    yield
    assert collect.proc.poll() is None, "the collector died"
    assert events(kafka_bootstrap, collect.topic) == []  # TICKs only
    log = collect.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


def good(**kw) -> bytes:
    return encode(
        broker_requests.register_request("C1", "broker-a", "127.0.0.1:10911", topics=TOPICS, **kw)
    )


def frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return (
        struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body
    )


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00\x00\x02\x00\x00",  # a frame shorter than its header length field
        frame(b"{not json"),
        frame(b"[1,2]"),
        frame(b"\x00" * 10, kind=1),  # ROCKETMQ header too short
        frame(b"{}", kind=7),  # unknown serialize type
        b"\xff\xff\xff\xff" + b"x" * 64,  # negative length
        struct.pack(">i", 17 * 1024 * 1024) + b"x" * 1024,  # over collector_max_frame_bytes
    ],
    ids=[
        "short",
        "bad-json",
        "json-array",
        "short-binary",
        "serialize-type",
        "negative",
        "oversized",
    ],
)
def test_bad_frames_close_the_connection(collect, data):
    answers, closed = exchange_bytes(collect.port, data, timeout=10)
    assert answers == [] and closed


def test_large_frame_of_another_code_is_refused(collect):
    """Only REGISTER_BROKER may use the large frame limit; others keep [serve] max_frame_bytes."""
    big = broker_requests.identity_request(
        RequestCode.BROKER_HEARTBEAT, "C1", "b", "127.0.0.1:1", body=b"x" * 100_000
    )
    answers, closed = exchange(collect.port, big, timeout=10)
    assert answers == [] and closed


@pytest.mark.parametrize("kind", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_error_answers(collect, kind):
    request = broker_requests.register_request(
        "C1", "broker-a", "127.0.0.1:10911", topics=TOPICS, serialize_type=kind
    )
    wrong = request.ext_fields | {"bodyCrc32": "12345"}
    cases = {
        "crc": broker_requests.register_request(
            "C1", "b", "a:1", opaque=1, serialize_type=kind, extra={"bodyCrc32": "12345"}
        ),
        "truncated": type(request)(
            **{
                **request.__dict__,
                "opaque": 2,
                "body": request.body[:-40],
                "ext_fields": request.ext_fields | {"bodyCrc32": "0"},
            }
        ),
        "truncated-crc": type(request)(
            **{**request.__dict__, "opaque": 3, "body": request.body[:-40], "ext_fields": wrong}
        ),
        "unknown": type(request)(code=9999, opaque=4, serialize_type=kind),
        "no-id": broker_requests.identity_request(
            RequestCode.UNREGISTER_BROKER, "C1", "b", "a:x", opaque=5
        ),
    }
    cases["no-id"] = type(request)(
        **{
            **cases["no-id"].__dict__,
            "ext_fields": {k: v for k, v in cases["no-id"].ext_fields.items() if k != "brokerId"},
        }
    )
    answers = {name: call(collect.port, r) for name, r in cases.items()}
    assert answers["crc"].remark == "crc32 not match"
    assert {n: a.code for n, a in answers.items()} == {
        "crc": 1,
        "truncated": 1,
        "truncated-crc": 1,
        "unknown": 3,
        "no-id": 1,
    }


def test_seeded_fuzz_of_register_frames(collect):
    rng = random.Random(9)
    base = [good(), good(compressed=True), good(serialize_type=SerializeType.ROCKETMQ)]
    sent = 0
    deadline = time.monotonic() + 60
    while sent < 150 and time.monotonic() < deadline:
        data = bytearray(rng.choice(base))
        head = struct.unpack(">i", data[4:8])[0] & 0xFFFFFF
        how = rng.choice(["body", "truncate", "garbage"])
        if how == "body":  # flip body bytes: the crc32 must catch it
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(8 + head, len(data))] ^= 1 << rng.randrange(8)
        elif how == "truncate":  # a whole frame whose body was cut short (crc32 too)
            cut = rng.randrange(8 + head, len(data) - 1)
            data = data[:cut]
            data[0:4] = struct.pack(">i", cut - 4)
        else:  # garbage after a valid prefix
            data = data[:8] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
            data[0:4] = struct.pack(">i", len(data) - 4)
        answers, closed = exchange_bytes(collect.port, bytes(data), timeout=10)
        assert closed and all(a.code != ResponseCode.SUCCESS for a in answers)
        sent += 1
    assert sent >= 50


def test_valid_request_still_answered_and_published(collect, kafka_bootstrap):
    response = call(
        collect.port,
        broker_requests.register_request("C1", "broker-a", "127.0.0.1:10911", topics=TOPICS),
    )
    assert response.code == ResponseCode.SUCCESS
    # the connection closed after its answer: its CHANNEL_CLOSED follows the REGISTER
    deadline = time.monotonic() + 20
    while len(published := events(kafka_bootstrap, collect.topic)) < 2:
        assert time.monotonic() < deadline, published
        time.sleep(0.2)
    assert [(e["eventType"], e["brokerName"]) for e in published] == [
        ("REGISTER", "broker-a"),
        ("CHANNEL_CLOSED", "broker-a"),
    ]
    # Leave the topic as the autouse check expects: only this test publishes, so drop it.
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_records({_tp(collect.topic): -1})
    finally:
        admin.close()


def _tp(topic: str):
    from kafka import TopicPartition

    return TopicPartition(topic, 0)
