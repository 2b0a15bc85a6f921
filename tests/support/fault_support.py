"""Shared by the fault tests: a Kafka broker of the test's own (it may be stopped and killed
without touching the shared one), a small simulated fleet produced in wall-clock time, the
streaming job as a process of its own, a /readyz watcher, and the checks against the
reference replay."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

from routelake_dev import kafka_local
from routelake_dev.simulator import make_producer
from routelake_dev.simulator.generation import FleetSimulator, with_disorder
from routing_lib.config import KafkaConfig
from routing_lib.core.as_of import as_of_view
from routing_lib.core.dump import project
from routing_lib.core.history import HISTORY_IDENTITY, HISTORY_TABLES
from routing_lib.core.replay import replay_dump
from routing_lib.core.tables import PROGRESS, ROUTE_TABLES, TABLE_KEYS, Row
from routing_lib.read.history import as_of_dump, load_history
from routing_lib.read.warehouse import load_snapshot
from schemas import parse_event
from tests.support.helpers import DELAY_MS, reference_dump
from tests.support.job_commands import run_args
from tests.support.kafka_support import rows

ROOT = Path(__file__).resolve().parents[2]
HOLD_RECORDS_MS = 30 * 60 * 1000


def free_port_pair() -> int:
    """A port p such that p and p + 1 (the broker's controller) are both free on loopback."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65535 and all(_free(p) for p in (port, port + 1)):
            return port
    raise RuntimeError("no two consecutive free ports on loopback")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class OwnBroker:
    """A single-node KRaft broker on ports and a data dir of its own (routelake_dev.kafka_local),
    so a test can stop and kill it while other tests use the shared one."""

    def __init__(self, data_dir: Path, template: KafkaConfig) -> None:
        port = free_port_pair()
        self.config = replace(
            template,
            bootstrap_servers=f"127.0.0.1:{port}",
            data_dir=str(data_dir),
        )
        self.bootstrap = self.config.bootstrap_servers

    def start(self) -> float:
        """Start it (the same data dir, so the topic and its offsets survive); seconds taken."""
        return kafka_local.start(self.config, heap="256m").seconds

    def stop(self) -> None:
        kafka_local.stop(self.config)

    def kill(self) -> None:
        """SIGKILL: no controlled shutdown, the log is recovered on the next start."""
        pid = kafka_local.status(self.config).pid
        assert pid is not None, "the broker is not running"
        os.kill(pid, 9)
        deadline = time.monotonic() + 10
        while kafka_local.status(self.config).pid is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        kafka_local.stop(self.config)  # forgets the pid file

    def create_topic(self, name: str) -> str:
        kafka_local.create_topic(self.bootstrap, name, partitions=1)
        return name


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[str]:
    """Every record of the (one-partition) topic in offset order: what the job was given."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        lines: list[str] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(partition) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                lines += [r.value.decode() for r in records]
        assert len(lines) == end, f"read {len(lines)} of {end} records of {topic}"
        return lines
    finally:
        consumer.close()


@dataclass
class LiveFleet:
    """A small fleet (3 broker groups, faults every ~20 s) whose events are produced when the
    wall clock reaches their eventTime, with a collector-like TICK every second: the watermark
    follows the wall clock, as in a deployment. Produced with the simulator's idempotent
    producer, which holds what it cannot deliver while the broker is away and sends it, in
    order, once it is back."""

    bootstrap: str
    topic: str
    seed: int = 7
    sent: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _flush_s: float = 150.0  # how long stop() waits for the last acknowledgements
    _thread: threading.Thread | None = None

    def __enter__(self) -> LiveFleet:
        self._thread = threading.Thread(target=self._run, name="live-fleet", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            self.stop()
        else:  # the test failed, perhaps with the broker down: do not wait for a flush
            self._flush_s = 1.0
            self._stop.set()

    def stop(self) -> None:
        """Stop producing; returns once everything sent was acknowledged."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._flush_s + 10)
            assert not self._thread.is_alive(), "the producer could not flush"

    def _events(self, start_ms: int) -> Iterator[dict[str, Any]]:
        fleet = FleetSimulator(
            self.seed, 3, 4, period_ms=6_000, start_ms=start_ms, fault_interval_ms=20_000
        )
        ticks = (
            {"eventType": "TICK", "eventTime": t, "source": "fault-test"}
            for t in _every(1000, start_ms)
        )
        yield from _merged(with_disorder(fleet.events(None), 500, self.seed), ticks)

    def _run(self) -> None:
        # Holds records for as long as any outage of these tests lasts (minutes on a loaded
        # machine): what the topic holds is then exactly what was sent.
        producer = make_producer(self.bootstrap, delivery_timeout_ms=HOLD_RECORDS_MS)
        try:
            for event in self._events(int(time.time() * 1000)):
                while (wait := event["eventTime"] / 1000 - time.time()) > 0:
                    if self._stop.wait(min(wait, 0.2)):
                        return
                key = event.get("brokerName", "").encode() or None
                future = producer.send(self.topic, key=key, value=json.dumps(event).encode())
                future.add_errback(lambda exc: self.errors.append(repr(exc)))
                self.sent += 1
        finally:
            producer.close(timeout=self._flush_s)  # flushes first


def _every(step_ms: int, start_ms: int) -> Iterator[int]:
    at = start_ms
    while True:
        at += step_ms
        yield at


def _merged(*streams: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Endless event streams merged by eventTime (each is in arrival order already)."""
    heads = [next(s) for s in streams]
    while True:
        i = min(range(len(heads)), key=lambda k: heads[k]["eventTime"])
        yield heads[i]
        heads[i] = next(streams[i])


def start_job(
    bootstrap: str,
    topic: str,
    warehouse: Path,
    checkpoint: Path,
    log_path: Path,
    **settings: str,
) -> subprocess.Popen:
    """`routectl run` as an operator starts it: its own process and JVM, logs to a file;
    `settings` are environment overrides (ROUTELAKE_<SECTION>_<KEY>)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, ROUTELAKE_DRIVER_MEMORY="1g")
    env.update(settings)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "routing_lib.cli",
                *run_args(
                    bootstrap,
                    topic,
                    warehouse,
                    checkpoint,
                    "--verbose",
                    "--trigger-interval",
                    "1 second",
                ),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


class JobProcess:
    """One `routectl run` (start_job) at a time over warehouse, checkpoint and log under
    `folder` unless given: what each fault test sets up around the job, and kills on the way
    out if the test ends while it runs."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        folder: Path,
        *,
        warehouse: Path | None = None,
        checkpoint: Path | None = None,
    ) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.warehouse = warehouse or folder / "warehouse"
        self.checkpoint = checkpoint or folder / "checkpoint"
        self.log = folder / "job.log"
        self._process: subprocess.Popen | None = None

    @property
    def process(self) -> subprocess.Popen:
        assert self._process is not None, "the job was not started"
        return self._process

    def start(self, **settings: str) -> None:
        self._process = start_job(
            self.bootstrap, self.topic, self.warehouse, self.checkpoint, self.log, **settings
        )

    def wait_running_until(
        self, predicate: Callable[[], bool], timeout_s: float, what: str
    ) -> None:
        """Waits for predicate while the job runs (its exit fails the test with its log)."""
        wait_for(lambda: running(self.process, self.log) and predicate(), timeout_s, what)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop_cleanly(self) -> None:
        """SIGTERM to a job that is still running; it exits 0."""
        assert self.process.poll() is None, "the job stopped:\n" + self.tail()
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(60) == 0, self.tail()

    def __enter__(self) -> JobProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(30)


def running(job: subprocess.Popen, log_path: Path) -> bool:
    """True while the job runs; fails the test with its log's end once it has stopped."""
    if job.poll() is None:
        return True
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
    raise AssertionError(f"the job exited with {job.returncode}:\n{tail}")


def published(warehouse: Path) -> list[dict]:
    """The progress rows (one per published micro-batch); [] before the first."""
    try:
        return rows(warehouse, PROGRESS)
    except Exception:  # the table does not exist yet
        return []


def wait_for(predicate, timeout_s: float, what: str, poll_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def staleness_bound(warehouse: Path, floor_s: float = 15.0) -> float:
    """A /readyz bound above what a healthy job shows here: the longest a published watermark
    has waited for the next one (watermark delay + trigger + batch time; a loaded machine
    stretches it), with a margin."""
    progress = sorted(published(warehouse), key=lambda r: r["batch_id"])
    ages = [
        (later["committed_at_ms"] - earlier["watermark"]) / 1000
        for earlier, later in pairwise(progress)
        if earlier["watermark"] > 0
    ]
    return max([floor_s, *[age * 1.2 + 5 for age in ages]])


def caught_up(warehouse: Path, lines: list[str], delay_ms: int = DELAY_MS) -> bool:
    """The job (watermark delay `delay_ms`) published every record and the final watermark of
    these lines."""
    progress = published(warehouse)
    if sum(r["input_rows"] for r in progress) < len(lines):
        return False
    return load_snapshot(warehouse).watermark == reference_dump(lines, None, delay_ms)["watermark"]


def assert_no_row_twice(warehouse: Path) -> dict[str, list[Row]]:
    """No route-table key and no history identity twice; returns the history read."""
    for table in ROUTE_TABLES:
        keys = [tuple(r[k] for k in TABLE_KEYS[table]) for r in rows(warehouse, table)]
        assert len(keys) == len(set(keys)), f"duplicate rows in {table}"
    history = load_history(warehouse)
    for table in HISTORY_TABLES:
        ids = [tuple(r[c] for c in HISTORY_IDENTITY[table]) for r in history[table]]
        assert len(ids) == len(set(ids)), f"duplicate rows in {table}"
    return history


def assert_matches_reference(
    warehouse: Path, lines: list[str], probes: int = 12, delay_ms: int = DELAY_MS
) -> None:
    """Route tables = the reference replay (to the final watermark of a job whose watermark
    delay is `delay_ms`); no route or history row twice; the history's as-of view = the replay
    at sampled times; every record counted once in the progress."""
    expected = reference_dump(lines, None, delay_ms)
    assert project(load_snapshot(warehouse).dump()) == expected
    history = assert_no_row_twice(warehouse)
    assert history["topic_route_history"], "no history written"
    events = [parse_event(line) for line in lines]
    times = sorted({e.eventTime for e in events if e.eventTime <= expected["watermark"]})
    step = max(1, len(times) // probes)
    for at in [*times[::step], expected["watermark"]]:
        assert as_of_dump(warehouse, at) == as_of_view(replay_dump(events, at)), f"as of {at}"
    progress = published(warehouse)
    batch_ids = [r["batch_id"] for r in progress]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was published twice"
    assert sum(r["input_rows"] for r in progress) == len(lines)


class ReadyzWatcher:
    """Polls the lookup's /readyz every 0.5 s and keeps (status, remark) in order."""

    def __init__(self, http_port: int) -> None:
        self.url = f"http://127.0.0.1:{http_port}/readyz"
        self.seen: list[tuple[float, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="readyz", daemon=True)

    def __enter__(self) -> ReadyzWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.wait(0.5):
                answer = client.get(self.url)
                remark = "" if answer.status_code == 200 else answer.text
                self.seen.append((time.monotonic(), answer.status_code, remark))

    def statuses_between(self, start: float, end: float) -> list[int]:
        return [status for at, status, _ in self.seen if start <= at <= end]

    def last(self) -> int | None:
        return self.seen[-1][1] if self.seen else None
