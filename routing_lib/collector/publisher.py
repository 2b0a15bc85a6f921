"""Kafka publishing for the collector: acks=all, idempotent, one asyncio future per record.

kafka-python's send() can block (metadata, a full buffer, a first connection), so it runs on
one worker thread: records reach the producer in the order the event loop submitted them,
which is the order the collector received the requests. A record's future resolves when
Kafka acknowledged it, or fails once `delivery_timeout_ms` has passed without that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger("routelake.collector")
# Kafka's message.max.bytes for route events (the local broker and every producer use it):
# a 20 000-topic registration is ~3 MB; leave headroom.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
RECONNECT_BACKOFF_S = 1.0  # between attempts to create a producer while Kafka is unreachable


class PublishError(RuntimeError):
    """The record was not acknowledged by Kafka (unreachable, timed out, refused)."""


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return  # cancelled meanwhile: the connection went away
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(
            error
            if isinstance(error, PublishError)
            else PublishError(f"{type(error).__name__}: {error}")
        )


class KafkaPublisher:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        client_id: str = "routelake-collector",
        delivery_timeout_ms: int = 10_000,
        **producer_settings: Any,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.settings: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "client_id": client_id,
            "acks": "all",
            "enable_idempotence": True,
            "compression_type": "gzip",
            "max_request_size": MAX_MESSAGE_BYTES,
            "linger_ms": 2,
            "batch_size": 1024 * 1024,
            "allow_auto_create_topics": False,
            "delivery_timeout_ms": delivery_timeout_ms,
            "request_timeout_ms": max(1000, delivery_timeout_ms // 2),
            "max_block_ms": delivery_timeout_ms,
            "reconnect_backoff_max_ms": 2000,
            # The constructor waits for a first broker: no longer than a record may wait.
            "bootstrap_timeout_ms": min(delivery_timeout_ms, 5000),
            **producer_settings,
        }
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collector-kafka")
        self._producer: Any = None
        self._next_attempt = 0.0

    def send(self, key: bytes | None, value: bytes) -> asyncio.Future[None]:
        """Queue one record (call on the event loop); the future is its acknowledgement."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._executor.submit(self._send, loop, future, key, value)
        return future

    def _producer_or_raise(self) -> Any:
        if self._producer is None:
            if time.monotonic() < self._next_attempt:
                raise PublishError(f"Kafka {self.bootstrap} unreachable (retrying)")
            from kafka import KafkaProducer

            try:
                self._producer = KafkaProducer(**self.settings)
            except Exception as exc:
                self._next_attempt = time.monotonic() + RECONNECT_BACKOFF_S
                log.warning("collector: cannot connect to Kafka %s: %s", self.bootstrap, exc)
                raise PublishError(f"Kafka {self.bootstrap} unreachable: {exc}") from None
        return self._producer

    def _send(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[None],
        key: bytes | None,
        value: bytes,
    ) -> None:
        def done(error: BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(_settle, future, error)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this answer any more

        try:
            record = self._producer_or_raise().send(self.topic, key=key, value=value)
        except Exception as exc:
            done(exc)
            return
        record.add_callback(lambda _metadata: done(None))
        record.add_errback(done)

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is queued (bounded), then close."""
        self._executor.shutdown(wait=True)
        if self._producer is not None:
            try:
                self._producer.flush(timeout=timeout_s)
            except Exception as exc:
                log.warning("collector: flush on close failed: %s", exc)
            self._producer.close(timeout=timeout_s)
            self._producer = None
