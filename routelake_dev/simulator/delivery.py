"""Delivery: producing a simulated fleet to Kafka (optionally archiving it as well) and
sending archive files to Kafka, with kafka-python."""

from __future__ import annotations

import gzip
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routelake_dev.simulator.encoding import (
    DEFAULT_ARCHIVE_MINUTES,
    ArchiveWriter,
    EventEncoder,
    iter_file_lines,
    line_key,
)
from routelake_dev.simulator.generation import (
    DEFAULT_FAULT_INTERVAL_MS,
    DEFAULT_HEARTBEATS_PER_PERIOD,
    iter_history,
)
from routing_lib.collector.publisher import MAX_MESSAGE_BYTES


def make_producer(bootstrap: str, **overrides: Any) -> Any:
    """A kafka-python producer for route events: gzip, 64 MiB requests, idempotent, acks=all."""
    from kafka import KafkaProducer

    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": "routelake-simulator",
        "compression_type": "gzip",
        "max_request_size": MAX_MESSAGE_BYTES,
        "linger_ms": 20,
        "batch_size": 256 * 1024,
        "acks": "all",
        "allow_auto_create_topics": False,
        "max_block_ms": 30_000,
    }
    settings.update(overrides)
    return KafkaProducer(**settings)


class _Sender:
    """Sends records and remembers the first delivery failure."""

    def __init__(self, producer: Any, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.sent = 0
        self.bytes = 0
        self.error: BaseException | None = None

    def _failed(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc

    def send(self, key: bytes | None, value: bytes) -> None:
        if self.error is not None:
            raise RuntimeError(f"delivery to {self.topic} failed: {self.error!r}")
        self.producer.send(self.topic, key=key, value=value).add_errback(self._failed)
        self.sent += 1
        self.bytes += len(value)

    def finish(self) -> None:
        self.producer.flush()
        if self.error is not None:
            raise RuntimeError(f"delivery to {self.topic} failed: {self.error!r}")


def _accepts_connections(addr: str, timeout_s: float = 2.0) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def check_topic(bootstrap: str, topic: str) -> None:
    """Fail fast (instead of a 30 s metadata timeout in the producer) if `topic` is missing."""
    from routelake_dev.kafka_local import topic_partitions

    if not any(_accepts_connections(addr.strip()) for addr in bootstrap.split(",")):
        raise RuntimeError(f"nothing listens on {bootstrap} (start Kafka: scripts/kafka.sh start)")
    try:
        partitions = topic_partitions(bootstrap, topic)
    except Exception as exc:  # kafka-python raises assorted connection/metadata errors here
        raise RuntimeError(
            f"cannot reach Kafka on {bootstrap}: {exc!r} (start it: scripts/kafka.sh start)"
        ) from exc
    if not partitions:
        raise RuntimeError(
            f"topic {topic!r} does not exist on {bootstrap} "
            f"(create it: scripts/kafka.sh topic --topic {topic})"
        )


@dataclass
class SimulateStats:
    events: int = 0
    bytes: int = 0
    first_event_time: int | None = None
    last_event_time: int | None = None
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, event_time: int, size: int) -> None:
        self.events += 1
        self.bytes += size
        if self.first_event_time is None:
            self.first_event_time = event_time
        self.last_event_time = event_time


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _first_event_time(start_ms: int | None, rate_limit: bool, duration_ms: int | None) -> int:
    """start_ms, else now, or now - duration when the whole history lies in the past."""
    if start_ms is not None:
        return start_ms
    return _now_ms() - (duration_ms if not rate_limit and duration_ms is not None else 0)


def _sleep_until(wall_ms: int) -> None:
    wait_ms = wall_ms - _now_ms()
    if wait_ms > 0:
        time.sleep(wait_ms / 1000)


def _close(archive: ArchiveWriter | None, sender: _Sender | None, stats: SimulateStats) -> None:
    if archive is not None:
        archive.close()
        stats.files = list(archive.files)
    if sender is not None:
        try:
            sender.finish()
        finally:
            sender.producer.close()


def simulate(
    bootstrap: str | None,
    topic: str,
    brokers: int,
    topics: int,
    period_ms: int,
    seed: int | str,
    rate_limit: bool,
    duration_s: float | None,
    archive_dir: str | Path | None,
    *,
    start_ms: int | None = None,
    disorder_ms: int = 0,
    heartbeats_per_period: int = DEFAULT_HEARTBEATS_PER_PERIOD,
    fault_interval_ms: int | None = DEFAULT_FAULT_INTERVAL_MS,
    archive_minutes: int = DEFAULT_ARCHIVE_MINUTES,
    progress_s: float | None = 10.0,
    log: Callable[[str], None] | None = None,
    producer_overrides: dict[str, Any] | None = None,
) -> SimulateStats:
    """Run the fleet: produce to Kafka (bootstrap not None) and/or write archives.

    start_ms defaults to the wall clock, or to now - duration when not rate limited with a
    finite duration (so the whole history lies in the past). With rate_limit each event is sent
    when the wall clock reaches its eventTime (live mode: eventTime ~ wall clock ms); archiving
    alone (bootstrap None) is never rate limited.
    Without a duration it runs until interrupted (KeyboardInterrupt ends it cleanly).
    """
    if bootstrap is None and archive_dir is None:
        raise ValueError("nothing to do: give a Kafka bootstrap address and/or an archive dir")
    if duration_s is None and archive_dir is not None and bootstrap is None:
        raise ValueError("archiving needs a duration")
    say = log or (lambda text: print(text, file=sys.stderr))
    duration_ms = None if duration_s is None else int(duration_s * 1000)
    start_ms = _first_event_time(start_ms, rate_limit, duration_ms)
    stats = SimulateStats()
    encoder = EventEncoder()
    sender = None
    if bootstrap is not None:
        check_topic(bootstrap, topic)
        sender = _Sender(make_producer(bootstrap, **(producer_overrides or {})), topic)
    archive = (
        ArchiveWriter(archive_dir, archive_minutes, disorder_ms)
        if archive_dir is not None
        else None
    )
    began = time.monotonic()
    wall_start = _now_ms()
    next_report = began + (progress_s or 0)
    events = iter_history(
        seed,
        brokers,
        topics,
        duration_ms,
        period_ms,
        start_ms,
        disorder_ms,
        heartbeats_per_period=heartbeats_per_period,
        fault_interval_ms=fault_interval_ms,
    )
    try:
        for event in events:
            event_time = event["eventTime"]
            if rate_limit and sender is not None:
                _sleep_until(event_time - start_ms + wall_start)
            line = encoder(event)
            if sender is not None:
                sender.send(event["brokerName"].encode(), line)
            if archive is not None:
                archive.write(event_time, line)
            stats.count(event_time, len(line))
            if progress_s and time.monotonic() >= next_report:
                next_report += progress_s
                say(
                    f"simulate: {stats.events} events, {stats.bytes / 1e6:.1f} MB, "
                    f"eventTime {event_time}"
                )
    except KeyboardInterrupt:
        say("simulate: interrupted, flushing")
    finally:
        _close(archive, sender, stats)
    stats.seconds = time.monotonic() - began
    return stats


def produce_files(
    bootstrap: str,
    topic: str,
    files: Iterable[str | Path],
    *,
    log: Callable[[str], None] | None = None,
    producer_overrides: dict[str, Any] | None = None,
) -> int:
    """Send every line of every file in order (lines as they are, malformed ones included),
    keyed by the line's brokerName when it has one. Returns the number of messages sent."""
    say = log or (lambda text: print(text, file=sys.stderr))
    check_topic(bootstrap, topic)
    producer = make_producer(bootstrap, **(producer_overrides or {}))
    try:
        sender = _Sender(producer, topic)
        for path in files:
            before = sender.sent
            try:
                for line in iter_file_lines(path):
                    sender.send(line_key(line), line)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                sender.finish()
                raise RuntimeError(
                    f"cannot read {path} after {sender.sent - before} lines: {exc}"
                ) from exc
            say(f"produce: {path}: {sender.sent - before} messages")
        sender.finish()
        return sender.sent
    finally:
        producer.close()


# ---- command line ---------------------------------------------------------------------------
