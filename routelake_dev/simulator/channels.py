"""The connections of a simulated fleet as one or two collectors see them (contract §2,
"Connections (channels)"): pure, deterministic for a seed.

`with_channels` takes a history in eventTime order and the simulator's fault log and returns the
history as collectors would publish it:

* every broker request reaches every collector (a broker lists them all in `namesrvAddr`):
  with two, each request is published twice, the second collector's copy a few ms later;
* each REGISTER / HEARTBEAT carries the channel it arrived on, `COLLECTOR@INCARNATION#N`; a
  broker's first request to a collector (or its first since its connection ended) opens a new
  one;
* a broker process that dies (a crash, or a restart within its timeout) closes its connections:
  mostly at once (the kernel resets the socket), sometimes only when the collector finds the
  connection idle for 120 s (a host that vanished), which may be after the broker came back on
  a new connection (a stale close) or after it expired (a close for a broker not live); now
  and then a close is published twice;
* an UNREGISTER (a clean shutdown, a master stepping down) is followed by its connection's
  close;
* each collector restarts now and then: its connections end without a close, and the brokers'
  next requests open connections of its new incarnation (its restart time).

Closes past `until_ms` are left out (the history ends there); an added event never shares an
eventTime with another event of its brokerName, so State(T) still does not depend on arrival
order (the simulator's promise, routelake_dev/simulator/__init__.py).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

Event = dict[str, Any]  # as routelake_dev.simulator.generation's (which imports this module)


class Fault(Protocol):
    """A fault of the simulator's log (generation.Fault): when, what, which address."""

    @property
    def time(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def brokerAddr(self) -> str: ...


COLLECTOR_IDS = ("collector-1", "collector-2")
IDLE_CLOSE_MS = 120_000  # RocketMQ's serverChannelMaxIdleTimeSeconds
MEAN_COLLECTOR_UPTIME_MS = 8 * 60_000
_DYING_FAULTS = ("crash", "restart")  # the process dies without an UNREGISTER
_IMMEDIATE_CLOSE_SHARE = 0.7
_REPEATED_CLOSE_SHARE = 0.1


@dataclass
class _Collector:
    name: str
    incarnation: int
    counter: int = 0

    def open(self) -> str:
        self.counter += 1
        return f"{self.name}@{self.incarnation}#{self.counter}"


@dataclass
class _Connection:
    channel: str
    last_request: int


@dataclass
class _Fleet:
    """What the collectors know: each broker address's open connection per collector, and the
    names its last request carried (a close is keyed like the broker's other events)."""

    rng: random.Random
    until_ms: int
    used_times: dict[str, set[int]]
    connections: dict[str, dict[str, _Connection]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    heads: dict[str, Event] = field(default_factory=dict)
    added: list[Event] = field(default_factory=list)

    def free_time(self, broker_name: str, at: int) -> int:
        """`at`, or the next ms no event of the brokerName has."""
        used = self.used_times[broker_name]
        while at in used:
            at += 1
        used.add(at)
        return at

    def close(self, addr: str, collector: str, at: int) -> None:
        connection = self.connections[addr].pop(collector, None)
        if connection is None:
            return
        head = self.heads[addr]
        times = [at]
        if self.rng.random() < _REPEATED_CLOSE_SHARE:
            times.append(at + self.rng.randint(1, 5_000))
        for when in times:
            if when >= self.until_ms:
                return
            self.added.append(
                {
                    **head,
                    "eventType": "CHANNEL_CLOSED",
                    "eventTime": self.free_time(head["brokerName"], when),
                    "channel": connection.channel,
                }
            )

    def process_died(self, addr: str, at: int) -> None:
        for collector, connection in list(self.connections[addr].items()):
            if self.rng.random() < _IMMEDIATE_CLOSE_SHARE:
                when = at + self.rng.randint(1, 500)
            else:  # nothing more arrives on it: the collector's idle check ends it
                when = connection.last_request + IDLE_CLOSE_MS + self.rng.randint(0, 1_000)
            self.close(addr, collector, when)


def with_channels(
    events: list[Event],
    faults: Iterable[Fault],
    seed: int | str,
    collectors: int,
    until_ms: int,
) -> list[Event]:
    """The history (eventTime order) as `collectors` (1 or 2) collectors publish it, in
    eventTime order; `faults`: the simulator's log of the same run."""
    if collectors not in (1, 2):
        raise ValueError(f"collectors must be 1 or 2, not {collectors}")
    if not events:
        return []
    rng = random.Random(f"routelake-channels:{seed}")
    start = events[0]["eventTime"]
    used: dict[str, set[int]] = defaultdict(set)
    for event in events:
        if "brokerName" in event:
            used[event["brokerName"]].add(event["eventTime"])
    fleet = _Fleet(rng, until_ms, used)
    running = [
        _Collector(name, start - rng.randint(1_000, 60_000)) for name in COLLECTOR_IDS[:collectors]
    ]
    restarts = sorted(
        (at, index) for index in range(collectors) for at in _restart_times(rng, start, until_ms)
    )
    deaths = sorted((f.time, f.brokerAddr) for f in faults if f.kind in _DYING_FAULTS)
    out: list[Event] = []
    for event in events:
        now = event["eventTime"]
        while restarts and restarts[0][0] <= now:
            at, index = restarts.pop(0)
            _restart(fleet, running[index], at)
        while deaths and deaths[0][0] <= now:
            at, addr = deaths.pop(0)
            fleet.process_died(addr, at)
        if event.get("eventType") not in ("REGISTER", "HEARTBEAT", "UNREGISTER"):
            out.append(event)
            continue
        for index, collector in enumerate(running):
            copy = dict(event)
            if index:  # the next collector receives the same request a little later
                copy["eventTime"] = fleet.free_time(event["brokerName"], now + rng.randint(1, 40))
            _publish(fleet, collector, copy)
            (out if index == 0 else fleet.added).append(copy)
    merged = [*out, *fleet.added]
    merged.sort(key=lambda e: e["eventTime"])  # stable: the history's order within one ms
    return merged


def _restart_times(rng: random.Random, start: int, until_ms: int) -> list[int]:
    times: list[int] = []
    at = start
    while True:
        at += int(rng.expovariate(1.0 / MEAN_COLLECTOR_UPTIME_MS)) + 1
        if at >= until_ms:
            return times
        times.append(at)


def _restart(fleet: _Fleet, collector: _Collector, at: int) -> None:
    """A collector's new incarnation: its connections are gone, and no close is published
    (a collector that is stopping publishes none for its own connections)."""
    collector.incarnation, collector.counter = at, 0
    for connections in fleet.connections.values():
        connections.pop(collector.name, None)


def _publish(fleet: _Fleet, collector: _Collector, event: Event) -> None:
    addr, at = event["brokerAddr"], event["eventTime"]
    fleet.heads[addr] = {
        k: event[k] for k in ("clusterName", "brokerAddr", "brokerName", "brokerId")
    }
    if event["eventType"] == "UNREGISTER":  # a clean shutdown: the connection closes after it
        fleet.close(addr, collector.name, at + fleet.rng.randint(1, 200))
        return
    connection = fleet.connections[addr].get(collector.name)
    if connection is None:
        connection = fleet.connections[addr][collector.name] = _Connection(collector.open(), at)
    connection.last_request = at
    event["channel"] = connection.channel
