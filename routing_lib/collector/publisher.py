"""Kafka publishing for the collector: acks=all, idempotent, one asyncio future per record.

kafka-python's send() can block (metadata, a full buffer, a first connection), so it runs on
one worker thread: records reach the producer in the order the event loop submitted them,
which is the order the collector received the requests. A record's future resolves when
Kafka acknowledged it, or fails once `delivery_timeout_ms` has passed without that.

kafka-python's idempotent producer can wedge: seen when Kafka stopped with a batch in flight,
the batch expired and the producer reset its producer id; once Kafka was back, nothing was sent
and no record was answered or expired again, ever. So every record's future has a bound of its
own (twice the delivery timeout): a record unanswered by then fails, and the producer is
replaced by a new one (a new producer id) for the records that follow.

After close() a record fails at once, and a bound that fires then only fails its record: the
executor that would replace the producer is shut down (issue 37).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger("routelake.collector")
# Kafka's message.max.bytes for route events (the local broker and every producer use it):
# a 20 000-topic registration is ~3 MB; leave headroom.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
RECONNECT_BACKOFF_S = 1.0  # between attempts to create a producer while Kafka is unreachable
# kafka-python answers or expires a record within the delivery timeout; a record still unanswered
# after this many delivery timeouts means a wedged producer
WEDGED_AFTER_DELIVERY_TIMEOUTS = 2


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
        producer_factory: Callable[..., Any] | None = None,
        **producer_settings: Any,
    ) -> None:
        """`producer_factory(**settings)` makes the producer (default: kafka-python's)."""
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
        self.wedged_after_s = WEDGED_AFTER_DELIVERY_TIMEOUTS * delivery_timeout_ms / 1000
        self._producer_factory = producer_factory
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collector-kafka")
        self._producer: Any = None
        self._generation = 0  # counts the producers made: a wedged one is replaced only once
        self._next_attempt = 0.0
        self.producers_replaced = 0

    def send(self, key: bytes | None, value: bytes) -> asyncio.Future[None]:
        """Queue one record (call on the event loop); the future is its acknowledgement."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        generation = self._generation
        try:
            self._executor.submit(self._send, loop, future, key, value)
        except RuntimeError:  # close() shut the executor down
            future.set_exception(PublishError(f"Kafka {self.bootstrap}: the publisher is closed"))
            return future
        bound = loop.call_later(self.wedged_after_s, self._unanswered, future, generation)
        future.add_done_callback(lambda _future: bound.cancel())
        return future

    def _unanswered(self, future: asyncio.Future[None], generation: int) -> None:
        if future.done():
            return
        _settle(
            future,
            PublishError(
                f"Kafka {self.bootstrap}: no answer within {self.wedged_after_s:g} s "
                "(the producer is replaced)"
            ),
        )
        # close() shuts the executor down: it closes the producer itself
        with contextlib.suppress(RuntimeError):
            self._executor.submit(self._replace_wedged, generation)

    def _replace_wedged(self, generation: int) -> None:
        """On the executor thread: drop the producer of `generation` unless already replaced."""
        if generation != self._generation or self._producer is None:
            return
        wedged, self._producer = self._producer, None
        self._generation += 1
        self.producers_replaced += 1
        log.warning(
            "collector: Kafka %s answered no record for %g s: replacing the producer",
            self.bootstrap,
            self.wedged_after_s,
        )
        # close() of a wedged producer may block; its records fail (their futures are settled)
        threading.Thread(
            target=wedged.close, kwargs={"timeout": 0}, name="collector-kafka-close", daemon=True
        ).start()

    def _make_producer(self) -> Any:
        if self._producer_factory is not None:
            return self._producer_factory(**self.settings)
        from kafka import KafkaProducer

        return KafkaProducer(**self.settings)

    def _producer_or_raise(self) -> Any:
        if self._producer is None:
            if time.monotonic() < self._next_attempt:
                raise PublishError(f"Kafka {self.bootstrap} unreachable (retrying)")
            try:
                self._producer = self._make_producer()
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
        """Flush what is queued (bounded), then close; later records fail at once."""
        self._executor.shutdown(wait=True)
        if self._producer is not None:
            try:
                self._producer.flush(timeout=timeout_s)
            except Exception as exc:
                log.warning("collector: flush on close failed: %s", exc)
            self._producer.close(timeout=timeout_s)
            self._producer = None
