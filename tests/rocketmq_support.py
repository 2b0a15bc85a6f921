"""Test support for the collector and the real RocketMQ broker: run the collector on a thread
against real Kafka, talk to it as a broker, read back what Kafka holds; run broker JVMs."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

from routing_lib.collector.publisher import KafkaPublisher
from routing_lib.collector.server import CollectorServer
from routing_lib.collector.service import Collector
from routing_lib.lookup.limits import Limits
from routing_lib.lookup.remoting import FrameDecoder, RemotingCommand, encode


class CollectorThread:
    """`routectl collect` in-process: a CollectorServer on its own event loop thread."""

    def __init__(self, bootstrap: str, topic: str, *, tick_interval_ms: int = 3_600_000,
                 publish_timeout_ms: int = 10_000, limits: Limits | None = None,
                 collector_id: str = "test-collector") -> None:
        self.publisher = KafkaPublisher(bootstrap, topic, delivery_timeout_ms=publish_timeout_ms)
        self.collector = Collector(self.publisher, collector_id=collector_id,
                                   tick_interval_ms=tick_interval_ms)
        self.limits = limits or Limits()
        self.started = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.server: CollectorServer

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        self.server = CollectorServer(self.collector, self.limits)
        try:
            await self.server.start()
        finally:
            self.started.set()
        try:
            await self.server.wait(self.stop_event)
        finally:
            await self.server.stop()

    @property
    def port(self) -> int:
        return self.server.port

    def __enter__(self) -> CollectorThread:
        self.thread.start()
        assert self.started.wait(20)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(40)
        assert not self.thread.is_alive()


def exchange(port: int, *requests: RemotingCommand, timeout: float = 30.0
             ) -> tuple[list[RemotingCommand], bool]:
    """Send requests on one connection, half-close, read to EOF: (answers, closed by peer)."""
    return exchange_bytes(port, b"".join(encode(r) for r in requests), timeout)


def exchange_bytes(port: int, data: bytes, timeout: float = 30.0
                   ) -> tuple[list[RemotingCommand], bool]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # refused mid-send
        raw = bytearray()
        closed = True
        try:
            while chunk := sock.recv(65536):
                raw += chunk
        except TimeoutError:
            closed = False
        except ConnectionResetError:
            pass
    return FrameDecoder().feed(bytes(raw)) if raw else [], closed


def call(port: int, request: RemotingCommand) -> RemotingCommand:
    answers, _ = exchange(port, request)
    assert len(answers) == 1, answers
    assert answers[0].opaque == request.opaque and answers[0].is_response
    return answers[0]


def records(bootstrap: str, topic: str, partition: int = 0) -> list[Any]:
    """Every record of one partition, as it is now."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             group_id=None)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[Any] = []
        while consumer.position(tp) < end:
            for batch in consumer.poll(timeout_ms=2000).values():
                out.extend(batch)
        return out
    finally:
        consumer.close()


def events(bootstrap: str, topic: str, *, ticks: bool = False) -> list[dict[str, Any]]:
    out = [json.loads(r.value) for r in records(bootstrap, topic)]
    return out if ticks else [e for e in out if e["eventType"] != "TICK"]
