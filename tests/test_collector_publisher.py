"""The collector's publisher replaces a wedged producer. The producer here is a stand-in whose
records are never answered (what kafka-python's idempotent producer did after Kafka stopped with
a batch in flight); the real producer through a real Kafka outage is test_real_broker's
`test_collector_and_kafka_restarts_lose_nothing_acknowledged`."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from routing_lib.collector.publisher import KafkaPublisher, PublishError


class _Record:
    def __init__(self, answer: bool) -> None:
        self.answer = answer

    def add_callback(self, callback: Any) -> None:
        if self.answer:
            callback(None)

    def add_errback(self, errback: Any) -> None:
        pass


class _Producer:
    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.sent = 0
        self.closed = threading.Event()

    def send(self, topic: str, key: bytes | None, value: bytes) -> _Record:
        self.sent += 1
        return _Record(self.answers)

    def close(self, timeout: float | None = None) -> None:
        self.closed.set()

    def flush(self, timeout: float | None = None) -> None:
        pass


def _publisher(producers: list[_Producer]) -> KafkaPublisher:
    made = iter(producers)
    # delivery timeout 100 ms: a record unanswered for 200 ms means a wedged producer
    return KafkaPublisher(
        "127.0.0.1:9", "t", delivery_timeout_ms=100, producer_factory=lambda **_: next(made)
    )


def test_an_unanswered_record_fails_and_the_next_goes_through_a_new_producer():
    wedged, fresh = _Producer(answers=False), _Producer(answers=True)
    publisher = _publisher([wedged, fresh])

    async def scenario() -> None:
        began = time.monotonic()
        with pytest.raises(PublishError, match="no answer within 0.2 s"):
            await publisher.send(None, b"first")
        assert 0.15 < time.monotonic() - began < 2
        await asyncio.sleep(0.05)  # the replacement runs on the publisher's thread
        await publisher.send(None, b"second")

    asyncio.run(scenario())
    assert wedged.sent == 1 and fresh.sent == 1
    assert wedged.closed.wait(2) and publisher.producers_replaced == 1
    publisher.close(1)


def test_answered_records_keep_their_producer():
    producer = _Producer(answers=True)
    publisher = _publisher([producer])

    async def scenario() -> None:
        for n in range(5):
            await publisher.send(None, b"%d" % n)
        await asyncio.sleep(0.3)  # past the bound: nothing fires for answered records

    asyncio.run(scenario())
    assert producer.sent == 5 and publisher.producers_replaced == 0
    assert not producer.closed.is_set()
    publisher.close(1)
    assert producer.closed.is_set()


def test_records_of_one_wedge_replace_the_producer_once():
    wedged, fresh = _Producer(answers=False), _Producer(answers=True)
    publisher = _publisher([wedged, fresh])

    async def scenario() -> None:
        results = await asyncio.gather(
            *(publisher.send(None, b"%d" % n) for n in range(3)), return_exceptions=True
        )
        assert all(isinstance(r, PublishError) for r in results)
        await asyncio.sleep(0.05)
        await publisher.send(None, b"after")

    asyncio.run(scenario())
    assert publisher.producers_replaced == 1 and fresh.sent == 1
    publisher.close(1)


def test_a_record_unanswered_at_close_fails_without_an_error_in_the_loop():
    """issue 37: the per-record bound fired after close() shut the executor down, and its
    `executor.submit` raised RuntimeError inside a loop callback (logged by asyncio as
    'Exception in callback'). The record must fail as not acknowledged, nothing raised."""
    publisher = _publisher([_Producer(answers=False)])
    errors: list[dict[str, Any]] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        record = publisher.send(None, b"unanswered")
        await asyncio.sleep(0.05)  # handed to the producer
        await asyncio.to_thread(publisher.close, 0.1)  # as Collector.close does
        with pytest.raises(PublishError):
            await asyncio.wait_for(record, 2)  # its bound (0.2 s) fires after the close
        await asyncio.sleep(0.05)
        assert [ctx.get("exception") for ctx in errors] == []

    asyncio.run(scenario())


def test_a_record_sent_after_close_fails_as_not_acknowledged():
    """The collector answers a broker SYSTEM_ERROR for a PublishError; a RuntimeError from the
    shut executor would be an internal error instead."""
    publisher = _publisher([_Producer(answers=True)])
    publisher.close(0.1)

    async def scenario() -> None:
        with pytest.raises(PublishError, match="closed"):
            await publisher.send(None, b"after close")

    asyncio.run(scenario())


@pytest.mark.kafka  # imports kafka-python (no broker needed): not the unit tier
def test_kafka_python_checksums_with_the_native_crc32c() -> None:
    """kafka-python checksums every record batch the collector sends with CRC32C: with the
    `crc32c` package (a dependency) when importable, else in pure Python (~100 ms per MB;
    bench/fleet_process.py refuses to run without it). Its checksum gives CRC-32C's check value
    (RFC 3720's polynomial) and takes well under the pure-Python time for a megabyte."""
    from kafka.record import util

    assert util.calc_crc32c(memoryview(b"123456789")) == 0xE3069283
    megabyte = memoryview(bytes(range(256)) * 4096)
    started = time.process_time()
    util.calc_crc32c(megabyte)
    assert time.process_time() - started < 0.02
