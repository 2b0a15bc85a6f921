"""The live stream benches' simulated fleet, producing to Kafka from a process of its own.

Why a process of its own: kafka-python compresses every record batch and checksums it (CRC32C)
in Python's sender thread. In the job's process that thread also shared the GIL with the
driver's writer and the bench's poller; in the quiet 300 x 10 000 run of 2026-11-27 23:00
registrations reached Kafka 14-24 s after the bench handed them to send(), and the bench
counted that as the job's freshness (docs/benchmarks.md "Freshness at 300 x 10 000: where the
40 s went"). Here the fleet competes with the job for the CPU only, as a collector on the same
machine would, and each change's freshness is also measured from Kafka's acknowledgement.

Its producer must keep up with its clock beside the job on two cores. A 300 x 10 000 fleet
registers ~20 times a second with ~1 MB of JSON each. With the collector's settings (gzip,
which kafka-python always runs at level 9, and its pure-Python CRC32C) that took 50.6 CPU-s
per 60 s of fleet (bench.fleet_producer_bench, 2026-11-28), and the quiet partition run's
fleet fell 167 s behind its clock. The fleet now compresses with LZ4 (Spark's Kafka client
reads it; the `lz4` package of the `bench` extra) over the `crc32c` package's native checksum,
and its encoder caches every group's table JSON: 5.8 CPU-s per 60 s.

Each measured change (a REGISTER with a (brokerAddr, dataVersion) not sent before, after the
warm-up) is reported to the parent twice: when handed to send() and when Kafka acknowledged it
(the record is in the log from then on, readable by the job). Times are wall clock seconds.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.backfill_bench import HEARTBEATS_PER_PERIOD, PERIOD_MS, SEED

WARM_UP_S = 20


@dataclass(frozen=True)
class FleetSpec:
    bootstrap: str
    topic: str
    brokers: int
    topics: int
    fault_interval_ms: int
    split_registration: int | None
    duration_s: float  # of event time; 0: until stopped or timed out
    timeout_s: float
    changes: int  # at most this many changes measured
    # a network partition: (start s of event time, fraction of the groups, seconds) or None
    partition: tuple[float, float, float] | None = None
    warm_up_s: float = WARM_UP_S  # changes sent before this are not measured


@dataclass
class Change:
    event_time: int  # ms
    broker: str
    sent: float  # wall clock s: handed to the producer
    acked: float | None = None  # wall clock s: acknowledged by Kafka


@dataclass
class FleetReport:
    """What the fleet process did, once it ended."""

    sent: int
    last_event_time: int  # ms, of the last event sent
    faults: int
    silenced: int  # events a partition kept from being sent
    ended: float  # wall clock s


def partition_cut(names: list[str], fraction: float) -> set[str]:
    """The broker groups a partition cuts off: the first `fraction` of them by name."""
    everyone = sorted(set(names))
    return set(everyone[: round(len(everyone) * fraction)])


class FleetProcess:
    """Start with start(); the changes fill in as the child reports them."""

    def __init__(self, spec: FleetSpec) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process holding a JVM
        self._messages: Any = context.Queue()
        self._stop: Any = context.Event()
        self._process = context.Process(
            target=_run, args=(spec, self._messages, self._stop), daemon=True
        )
        self.changes: dict[tuple, Change] = {}
        self.names: list[str] = []
        self.wall_start_ms = 0  # the fleet's clock: eventTime of wall time 0 of the run
        self.started = 0.0  # wall clock s when the first event could be sent
        self.report: FleetReport | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        # the partition's cut-off groups' events as sent, and their returns as acknowledged,
        # for the lookup's watch; those that come before the listeners are set are kept
        self._listener: Callable[[dict], None] | None = None
        self._on_return: Callable[[str, float], None] | None = None
        self._early: list[tuple[str, tuple]] = []
        self._listener_lock = threading.Lock()

    def start(self) -> FleetProcess:
        self._process.start()
        threading.Thread(target=self._drain, daemon=True, name="fleet-reports").start()
        if not self._ready.wait(600):
            raise RuntimeError("the fleet process did not start")
        return self

    def on_cut_off_event(
        self,
        listener: Callable[[dict], None],
        on_return: Callable[[str, float], None] | None = None,
    ) -> None:
        """`listener(event)` for every event of a group the partition cuts off, as sent (its
        brokerName, brokerAddr, eventType, eventTime, heartbeatTimeoutMillis);
        `on_return(brokerName, wall clock s)` when Kafka acknowledged the group's first
        REGISTER after the partition that brings its topics back (`brings_routes_back`; from
        then on the job can read its return)."""
        with self._listener_lock:
            self._listener, self._on_return = listener, on_return
            for kind, body in self._early:
                self._forward(kind, body)
            self._early.clear()

    def _forward(self, kind: str, body: tuple) -> None:
        if kind == "event" and self._listener is not None:
            self._listener(body[0])
        elif kind == "return_acked" and self._on_return is not None:
            self._on_return(*body)

    def stop(self) -> None:
        """Ask the fleet to stop sending (it flushes what it sent and reports)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> FleetReport:
        if not self._done.wait(timeout):
            raise RuntimeError("the fleet process did not report its end")
        assert self.report is not None
        self._process.join(30)
        return self.report

    def _drain(self) -> None:
        while not self._done.is_set():
            try:
                kind, *body = self._messages.get(timeout=1)
            except queue.Empty:
                if not self._process.is_alive() and not self._done.is_set():
                    raise RuntimeError("the fleet process died") from None
                continue
            if kind == "sent":
                key, event_time, broker, sent = body
                self.changes[key] = Change(event_time, broker, sent)
            elif kind == "acked":
                key, acked = body
                self.changes[key].acked = acked  # "sent" is queued before its callback runs
            elif kind in ("event", "return_acked"):
                with self._listener_lock:
                    if self._listener is None:
                        self._early.append((kind, tuple(body)))
                    else:
                        self._forward(kind, tuple(body))
            elif kind == "fleet":
                self.names, self.wall_start_ms, self.started = body
                self._ready.set()
            elif kind == "done":
                self.report = FleetReport(*body)
                self._done.set()


def brings_routes_back(event: dict) -> bool:
    """Whether an absent group's REGISTER brings its topics back: its master's (brokerId 0),
    or a slave's where acting master is enabled (as the only address listed it is the prime
    slave, whose configs RouteInfoManager sets without the write bit). A slave's without
    acting master brings no route (RocketMQ takes topic configs from masters)."""
    return event.get("eventType") == "REGISTER" and (
        event.get("brokerId") == 0 or bool(event.get("enableActingMaster"))
    )


@dataclass
class _Silence:
    names: set[str]
    start_ms: int
    end_ms: int
    count: int = field(default=0)
    returned: set[str] = field(default_factory=set)

    def silences(self, event: dict) -> bool:
        silent = (
            self.start_ms <= event["eventTime"] < self.end_ms
            and event.get("brokerName") in self.names
        )
        self.count += silent
        return silent

    def first_return(self, event: dict) -> bool:
        """Whether a sent event is its cut-off group's first REGISTER after the partition that
        brings its topics back (`brings_routes_back`)."""
        name = event.get("brokerName")
        if (
            not brings_routes_back(event)
            or event["eventTime"] < self.end_ms
            or name not in self.names
            or name in self.returned
        ):
            return False
        self.returned.add(name)
        return True


# what the lookup's watch of a partition reads of an event (bench/partition_lookup.py)
WATCHED_FIELDS = (
    "brokerName",
    "brokerAddr",
    "brokerId",
    "enableActingMaster",
    "eventType",
    "eventTime",
    "heartbeatTimeoutMillis",
)


def _version_key(event: dict) -> tuple:
    version = event["dataVersion"]
    return (event["brokerAddr"], version["stateVersion"], version["timestamp"], version["counter"])


# LZ4 costs ~0.5 ms per 1 MB registration where kafka-python's gzip (level 9) costs ~27 ms;
# it compresses the fleet's JSON ~7x (gzip ~16x), plenty for a local Kafka
FLEET_COMPRESSION = "lz4"


def fleet_producer(bootstrap: str, compression: str | None = FLEET_COMPRESSION) -> Any:
    """The fleet's kafka-python producer (bench.fleet_producer_bench measures it alone).

    Refuses to run without native CRC32C and LZ4: kafka-python would fall back to a
    pure-Python checksum (~100 ms per uncompressed MB) or refuse LZ4 only at the first send,
    and a fleet behind its clock measures itself instead of the job."""
    from kafka import codec
    from kafka.record import util

    from routelake_dev.simulator import make_producer

    if util.crc32c_c is None or (compression == "lz4" and not codec.has_lz4()):
        raise RuntimeError(
            "the bench's fleet needs the crc32c and lz4 packages: "
            ".venv/bin/pip install -e '.[bench]' (scripts/setup.sh installs them)"
        )
    return make_producer(bootstrap, acks=1, linger_ms=5, compression_type=compression)


def _run(spec: FleetSpec, messages: Any, stop: Any) -> None:
    """The child: the fleet's events at their eventTime on the wall clock, into Kafka."""
    from routelake_dev.simulator import EventEncoder, FleetSimulator

    producer = fleet_producer(spec.bootstrap)
    wall_start_ms = int(time.time() * 1000)
    fleet = FleetSimulator(
        SEED,
        spec.brokers,
        spec.topics,
        PERIOD_MS,
        wall_start_ms,
        heartbeats_per_period=HEARTBEATS_PER_PERIOD,
        fault_interval_ms=spec.fault_interval_ms,
        split_registration=spec.split_registration,
    )
    names = [group.name for group in fleet._groups]
    silence = None
    if spec.partition is not None:
        at_s, fraction, seconds = spec.partition
        start_ms = wall_start_ms + int(at_s * 1000)
        silence = _Silence(partition_cut(names, fraction), start_ms, start_ms + int(seconds * 1000))
    started = time.monotonic()
    messages.put(("fleet", names, wall_start_ms, time.time()))
    encode, known, sent, measured = EventEncoder(), set(), 0, 0
    last_sent_ms = wall_start_ms  # eventTime of the last event sent
    for event in fleet.events():
        wait_s = (event["eventTime"] - wall_start_ms) / 1000 - (time.monotonic() - started)
        if wait_s > 0:
            time.sleep(wait_s)
        elapsed = time.monotonic() - started
        if stop.is_set() or elapsed >= spec.timeout_s:
            break
        if spec.duration_s and event["eventTime"] - wall_start_ms >= spec.duration_s * 1000:
            break
        if silence is not None and silence.silences(event):
            continue
        future = producer.send(spec.topic, key=event["brokerName"].encode(), value=encode(event))
        sent += 1
        last_sent_ms = event["eventTime"]
        if silence is not None and event["brokerName"] in silence.names:
            messages.put(("event", {k: event.get(k) for k in WATCHED_FIELDS}))
            if silence.first_return(event):
                # the lookup's "back" is timed from here: the job can read the return from
                # Kafka's acknowledgement on, however late the fleet sent it
                name = event["brokerName"]
                future.add_callback(
                    lambda _meta, name=name: messages.put(("return_acked", name, time.time()))
                )
        if event["eventType"] != "REGISTER" or _version_key(event) in known:
            continue
        key = _version_key(event)
        known.add(key)
        if elapsed >= spec.warm_up_s and measured < spec.changes:
            measured += 1
            messages.put(("sent", key, event["eventTime"], event["brokerName"], time.time()))
            # Kafka's acknowledgement (on kafka-python's sender thread): the record is in the
            # log from then on, readable by the job
            future.add_callback(lambda _meta, key=key: messages.put(("acked", key, time.time())))
    producer.close()
    silenced = silence.count if silence is not None else 0
    messages.put(("done", sent, last_sent_ms, len(fleet.faults), silenced, time.time()))
