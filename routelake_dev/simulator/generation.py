"""Pure event generation: a seeded broker fleet (`FleetSimulator`) and its histories
(`iter_history`, `generate_history`, `simulate_history`), bounded arrival disorder and
interleaved operator events. Deterministic for a seed, no I/O. The fleet and its faults are
described in the package docstring (routelake_dev/simulator/__init__.py).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from routelake_dev.simulator.channels import with_channels
from schemas.route_event import DEFAULT_HEARTBEAT_TIMEOUT_MILLIS

DEFAULT_START_MS = 1_764_000_000_000
DEFAULT_PERIOD_MS = 30_000
DEFAULT_HEARTBEATS_PER_PERIOD = 2
DEFAULT_FAULT_INTERVAL_MS = 600_000
FAULT_KINDS = ("crash", "unregister", "restart", "role_switch", "topic_change", "filter_servers")
_FAULT_WEIGHTS = {
    "crash": 3,
    "unregister": 2,
    "restart": 3,
    "role_switch": 3,
    "topic_change": 6,
    "filter_servers": 3,
}
Event = dict[str, Any]


@dataclass(frozen=True)
class Fault:
    """What the simulator did (for tests and logs; not part of the event stream)."""

    time: int
    kind: str
    brokerName: str
    brokerAddr: str
    detail: str = ""


@dataclass
class _Node:
    """One broker process; its address is fixed, its role (brokerId) may change."""

    host: str
    port: int
    broker_id: int
    timeout_override: int | None
    always_sends_filters: bool
    filters: list[str] = field(default_factory=list)
    filters_dirty: bool = False
    up: bool = True
    epoch: int = 0  # bumped whenever it goes down: stale scheduled ticks are dropped
    base: int = 0  # time of its latest (re)start; ticks are scheduled from here
    tick: int = 0
    pending_id: int | None = None  # role switch: the id it returns with
    chunks_sent: int = 0  # split registration: each chunk carries the next dataVersion

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ha_addr(self) -> str:
        return f"{self.host}:{self.port + 1}"

    @property
    def timeout(self) -> int:
        return self.timeout_override or DEFAULT_HEARTBEAT_TIMEOUT_MILLIS


@dataclass
class _Group:
    name: str
    cluster: str
    acting_master: bool | None
    zone: str | None
    topics: dict[str, dict[str, Any]]  # replaced on change, never mutated (events share it)
    data_version: dict[str, int]  # likewise
    nodes: list[_Node]
    last_time: int = 0  # eventTime of its latest event (kept strictly increasing)
    busy_until: int = 0  # no new fault before this

    def master(self) -> _Node | None:
        return next((n for n in self.nodes if n.up and n.broker_id == 0), None)


class FleetSimulator:
    """Generates the fleet's events in eventTime order (see the module docstring)."""

    def __init__(
        self,
        seed: int | str,
        brokers: int,
        topics: int,
        period_ms: int = DEFAULT_PERIOD_MS,
        start_ms: int = DEFAULT_START_MS,
        *,
        heartbeats_per_period: int = DEFAULT_HEARTBEATS_PER_PERIOD,
        fault_interval_ms: int | None = DEFAULT_FAULT_INTERVAL_MS,
        split_registration: int | None = None,
    ) -> None:
        """`split_registration`: brokers register as RocketMQ 5.1.4+ does with
        enableSplitRegistration, in chunks of that many topics, each chunk with a new
        dataVersion (5.1.4-5.3.3 bump it per chunk)."""
        if brokers < 1 or topics < 0 or period_ms < 10 or heartbeats_per_period < 0:
            raise ValueError(
                "need brokers >= 1, topics >= 0, period_ms >= 10, heartbeats_per_period >= 0"
            )
        if start_ms <= 0:
            raise ValueError("start_ms must be a positive epoch time in ms")
        self.seed = seed
        self.period_ms = period_ms
        self.start_ms = start_ms
        self.heartbeats_per_period = heartbeats_per_period
        self.interval_ms = max(1, period_ms // (heartbeats_per_period + 1))
        self.fault_interval_ms = fault_interval_ms or 0
        self.split_registration = split_registration
        self.faults: list[Fault] = []
        self._rng = random.Random(f"routelake-fleet:{seed}")
        self._heap: list[tuple[int, int, str, int, int, int]] = []
        self._seq = 0
        self._out: list[Event] = []
        self._pool_counter = 0
        self._pool: list[dict[str, Any]] = []
        self._groups: list[_Group] = []
        self._build_fleet(brokers, topics)

    # ---- fleet construction -------------------------------------------------------------

    def _topic(self, name: str, read: int, write: int, perm: int) -> dict[str, Any]:
        return {
            "topicName": name,
            "readQueueNums": read,
            "writeQueueNums": write,
            "perm": perm,
            "topicSysFlag": 0,
        }

    def _new_pool_topic(self) -> dict[str, Any]:
        rng = self._rng
        queues = rng.choice((1, 2, 4, 8, 8, 16, 16))
        write = queues if rng.random() < 0.8 else max(1, queues // 2)
        perm = 6 if rng.random() < 0.9 else rng.choice((2, 4))
        config = self._topic(f"Topic{self._pool_counter}", queues, write, perm)
        self._pool_counter += 1
        self._pool.append(config)
        return config

    def _build_fleet(self, brokers: int, topics: int) -> None:
        rng = self._rng
        clusters = [f"cluster-{c}" for c in range(rng.randint(1, min(3, brokers)))]
        for _ in range(max(topics, topics * 3 // 2)):
            self._new_pool_topic()
        next_host = 1
        for g in range(brokers):
            name = f"broker-{g}"
            cluster = clusters[g % len(clusters)]
            table = {
                "TBW102": self._topic("TBW102", 8, 8, 7),
                cluster: self._topic(cluster, 16, 16, 6),
                name: self._topic(name, 1, 1, 6),
            }
            for index in sorted(rng.sample(range(len(self._pool)), topics)):
                table[self._pool[index]["topicName"]] = self._pool[index]
            dice = rng.random()
            acting = None if dice < 0.3 else (dice > 0.7)
            zone = rng.choice((None, "zone-a", "zone-b", "zone-c"))
            version = {
                "stateVersion": 0,
                "timestamp": self.start_ms - rng.randint(60_000, 86_400_000),
                "counter": rng.randint(1, 20),
            }
            nodes = []
            for broker_id in range(1 + rng.randint(0, 2)):
                host = f"10.{next_host >> 16 & 255}.{next_host >> 8 & 255}.{next_host & 255}"
                next_host += 1
                override = rng.choice((3, 4, 6)) * self.period_ms if rng.random() < 0.25 else None
                nodes.append(_Node(host, 10911, broker_id, override, rng.random() < 0.7))
            group = _Group(name, cluster, acting, zone, table, version, nodes)
            self._groups.append(group)
            for n_index, node in enumerate(nodes):
                node.base = self.start_ms + rng.randrange(self.period_ms)
                self._push(node.base, "tick", g, n_index, node.epoch)
            self._schedule_fault(g, self.start_ms)

    # ---- scheduling ---------------------------------------------------------------------

    def _push(self, at: int, action: str, group: int, node: int = -1, epoch: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, action, group, node, epoch))

    def _schedule_fault(self, g: int, after: int) -> None:
        if self.fault_interval_ms > 0:
            delay = int(self._rng.expovariate(1.0 / self.fault_interval_ms))
            self._push(after + max(1000, delay), "fault", g)

    def _schedule_tick(self, g: int, n: int, node: _Node) -> None:
        jitter = self._rng.randint(0, min(200, self.interval_ms // 10))
        self._push(node.base + node.tick * self.interval_ms + jitter, "tick", g, n, node.epoch)

    def events(self, until_ms: int | None = None) -> Iterator[Event]:
        """Events with eventTime < until_ms (forever if None), in eventTime order."""
        while self._heap:
            at, _, action, g, n, epoch = self._heap[0]
            if until_ms is not None and at >= until_ms:
                return
            heapq.heappop(self._heap)
            group = self._groups[g]
            if at <= group.last_time:  # keep eventTimes unique within a brokerName
                self._push(group.last_time + 1, action, g, n, epoch)
                continue
            if action == "tick":
                self._tick(at, g, n, epoch)
            elif action == "fault":
                self._fault(at, g)
            elif action == "return":
                self._return(at, g, n)
            elif action == "promote":
                self._promote(at, g, n)
            yield from self._out
            self._out.clear()

    # ---- event construction -------------------------------------------------------------

    def _emit(self, at: int, group: _Group, event: Event) -> None:
        group.last_time = at
        self._out.append(event)

    def _base_event(self, kind: str, at: int, group: _Group, node: _Node) -> Event:
        return {
            "eventType": kind,
            "eventTime": at,
            "clusterName": group.cluster,
            "brokerAddr": node.addr,
            "brokerName": group.name,
            "brokerId": node.broker_id,
        }

    def _register(self, at: int, group: _Group, node: _Node) -> None:
        event = self._base_event("REGISTER", at, group, node)
        event["haServerAddr"] = node.ha_addr
        event["dataVersion"] = group.data_version
        event["topicConfigTable"] = group.topics
        if node.always_sends_filters or node.filters_dirty:
            event["filterServerList"] = list(node.filters)
            node.filters_dirty = False
        if node.timeout_override is not None:
            event["heartbeatTimeoutMillis"] = node.timeout_override
        if group.acting_master is not None:
            event["enableActingMaster"] = group.acting_master
        if group.zone is not None:
            event["zoneName"] = group.zone
        size = self.split_registration
        if not size or len(group.topics) <= size:
            self._emit(at, group, event)
            return
        names = list(group.topics)
        for start in range(0, len(names), size):
            node.chunks_sent += 1
            chunk = dict(event)
            chunk["topicConfigTable"] = {n: group.topics[n] for n in names[start : start + size]}
            chunk["dataVersion"] = dict(group.data_version, counter=node.chunks_sent)
            self._emit(at, group, chunk)

    # ---- actions ------------------------------------------------------------------------

    def _tick(self, at: int, g: int, n: int, epoch: int) -> None:
        group = self._groups[g]
        node = group.nodes[n]
        if not node.up or epoch != node.epoch:
            return
        if node.tick % (self.heartbeats_per_period + 1) == 0:
            self._register(at, group, node)
        else:
            self._emit(at, group, self._base_event("HEARTBEAT", at, group, node))
        node.tick += 1
        self._schedule_tick(g, n, node)

    def _restart_at(self, at: int, g: int, n: int) -> None:
        self._push(at, "return", g, n)

    def _return(self, at: int, g: int, n: int) -> None:
        node = self._groups[g].nodes[n]
        if node.pending_id is not None:
            node.broker_id, node.pending_id = node.pending_id, None
        node.up = True
        node.base = at
        node.tick = 0
        self._tick(at, g, n, node.epoch)

    def _down(self, node: _Node) -> None:
        node.up = False
        node.epoch += 1

    def _fault(self, at: int, g: int) -> None:
        group = self._groups[g]
        rng = self._rng
        if at < group.busy_until:
            self._schedule_fault(g, group.busy_until)
            return
        live = [i for i, node in enumerate(group.nodes) if node.up]
        master = group.master()
        slaves = [i for i in live if group.nodes[i].broker_id > 0]
        kinds = []
        if live:
            kinds += ["crash", "unregister", "restart", "filter_servers"]
        if master is not None:
            kinds.append("topic_change")
            if slaves:
                kinds.append("role_switch")
        if kinds:
            kind = rng.choices(kinds, weights=[_FAULT_WEIGHTS[k] for k in kinds])[0]
            getattr(self, f"_fault_{kind}")(at, g, live, slaves)
        self._schedule_fault(g, max(at, group.busy_until))

    def _record(self, at: int, kind: str, group: _Group, node: _Node, detail: str = "") -> None:
        self.faults.append(Fault(at, kind, group.name, node.addr, detail))

    def _back_after(self, at: int, g: int, n: int, kind: str, downtime: int) -> None:
        """After fault `kind`, node n of group g registers again `downtime` ms later."""
        group = self._groups[g]
        self._record(at, kind, group, group.nodes[n], f"back after {downtime} ms")
        self._restart_at(at + downtime, g, n)
        group.busy_until = at + downtime

    def _fault_crash(self, at: int, g: int, live: list[int], slaves: list[int]) -> None:
        group, rng = self._groups[g], self._rng
        n = rng.choice(live)
        node = group.nodes[n]
        self._down(node)
        if rng.random() < 0.15:
            self._record(at, "crash", group, node, "gone for good")
            return
        margin = self.interval_ms + 1000
        self._back_after(
            at, g, n, "crash", node.timeout + rng.randint(margin, max(margin, node.timeout))
        )

    def _fault_unregister(self, at: int, g: int, live: list[int], slaves: list[int]) -> None:
        group, rng = self._groups[g], self._rng
        n = rng.choice(live)
        node = group.nodes[n]
        self._emit(at, group, self._base_event("UNREGISTER", at, group, node))
        self._down(node)
        if rng.random() < 0.2:
            self._record(at, "unregister", group, node, "gone for good")
            return
        self._back_after(at, g, n, "unregister", rng.randint(5_000, 300_000))

    def _fault_restart(self, at: int, g: int, live: list[int], slaves: list[int]) -> None:
        group, rng = self._groups[g], self._rng
        n = rng.choice(live)
        node = group.nodes[n]
        self._down(node)
        self._back_after(at, g, n, "restart", rng.randint(1_000, max(1_000, node.timeout // 4)))

    def _fault_role_switch(self, at: int, g: int, live: list[int], slaves: list[int]) -> None:
        group, rng = self._groups[g], self._rng
        m = next(i for i in live if group.nodes[i].broker_id == 0)
        s = rng.choice(slaves)
        old_master, slave = group.nodes[m], group.nodes[s]
        self._emit(at, group, self._base_event("UNREGISTER", at, group, old_master))
        self._down(old_master)
        old_master.pending_id = slave.broker_id
        promote_at = at + rng.randint(1_000, 5_000)
        rejoin_at = promote_at + rng.randint(2_000, 30_000)
        self._record(at, "role_switch", group, old_master, f"{slave.addr} takes over")
        self._push(promote_at, "promote", g, s)
        self._restart_at(rejoin_at, g, m)
        group.busy_until = rejoin_at

    def _promote(self, at: int, g: int, n: int) -> None:
        group = self._groups[g]
        node = group.nodes[n]
        if not node.up:  # cannot happen while the group is busy; be safe anyway
            return
        version = group.data_version
        group.data_version = {
            "stateVersion": version["stateVersion"] + 1,
            "timestamp": at - self._rng.randint(0, 50),
            "counter": version["counter"] + 1,
        }
        node.broker_id = 0
        self._register(at, group, node)

    def _fault_topic_change(self, at: int, g: int, live: list[int], slaves: list[int]) -> None:
        group, rng = self._groups[g], self._rng
        master = group.master()
        assert master is not None
        table = dict(group.topics)
        system = {"TBW102", group.cluster, group.name}
        changes = []
        for _ in range(rng.randint(1, 3)):
            user = [name for name in table if name not in system]
            op = rng.choice(("perm", "queues", "add", "add", "drop")) if user else "add"
            if op == "add":
                candidates = [
                    t
                    for t in rng.sample(self._pool, min(8, len(self._pool)))
                    if t["topicName"] not in table
                ]
                topic = candidates[0] if candidates else self._new_pool_topic()
                table[topic["topicName"]] = topic
                changes.append(f"+{topic['topicName']}")
                continue
            name = rng.choice(user)
            if op == "drop":
                del table[name]
                changes.append(f"-{name}")
            elif op == "perm":
                old = table[name]
                perm = rng.choice([p for p in (2, 4, 6) if p != old["perm"]])
                table[name] = self._topic(name, old["readQueueNums"], old["writeQueueNums"], perm)
                changes.append(f"{name} perm {perm}")
            else:
                old = table[name]
                queues = rng.choice([q for q in (1, 2, 4, 8, 16, 32) if q != old["readQueueNums"]])
                table[name] = self._topic(name, queues, queues, old["perm"])
                changes.append(f"{name} queues {queues}")
        group.topics = table
        version = group.data_version
        group.data_version = {
            "stateVersion": version["stateVersion"],
            "timestamp": at - rng.randint(0, 50),
            "counter": version["counter"] + 1,
        }
        self._record(at, "topic_change", group, master, ", ".join(changes))
        self._register(at, group, master)

    def _fault_filter_servers(self, at: int, g: int, live: list[int], slaves: list[int]) -> None:
        group, rng = self._groups[g], self._rng
        node = group.nodes[rng.choice(live)]
        if node.filters:
            node.filters = []
        else:
            node.filters = [f"{node.host}:{30000 + i}" for i in range(rng.randint(1, 2))]
        node.filters_dirty = True
        self._record(at, "filter_servers", group, node, ",".join(node.filters) or "cleared")


def with_disorder(events: Iterable[Event], disorder_ms: int, seed: int | str) -> Iterator[Event]:
    """Arrival order for events given in eventTime order: each is delayed by a seeded random
    0..disorder_ms and they arrive by (eventTime + delay, original position)."""
    if disorder_ms <= 0:
        yield from events
        return
    rng = random.Random(f"routelake-arrival:{seed}")
    pending: list[tuple[int, int, Event]] = []
    for position, event in enumerate(events):
        now = event["eventTime"]
        while pending and pending[0][0] <= now:  # later events all have a key >= now
            yield heapq.heappop(pending)[2]
        heapq.heappush(pending, (now + rng.randint(0, disorder_ms), position, event))
    while pending:
        yield heapq.heappop(pending)[2]


def iter_history(
    seed: int | str,
    brokers: int,
    topics: int,
    duration_ms: int | None,
    period_ms: int = DEFAULT_PERIOD_MS,
    start_ms: int = DEFAULT_START_MS,
    disorder_ms: int = 0,
    *,
    simulator: FleetSimulator | None = None,
    collectors: int = 0,
    **options: Any,
) -> Iterator[Event]:
    """Events in arrival order; endless when duration_ms is None. `options` go to
    FleetSimulator (heartbeats_per_period, fault_interval_ms). `collectors` (1 or 2): the
    history as that many collectors publish it, with connections and their closes
    (routelake_dev/simulator/channels.py); 0: no channels (an archive's)."""
    sim = simulator or FleetSimulator(seed, brokers, topics, period_ms, start_ms, **options)
    until = None if duration_ms is None else sim.start_ms + duration_ms
    if not collectors:
        return with_disorder(sim.events(until), disorder_ms, seed)
    if until is None:
        raise ValueError("connections are simulated over a history of known length only")
    published = with_channels(list(sim.events(until)), sim.faults, seed, collectors, until)
    return with_disorder(published, disorder_ms, seed)


def generate_history(
    seed: int | str,
    brokers: int,
    topics: int,
    duration_ms: int,
    period_ms: int = DEFAULT_PERIOD_MS,
    start_ms: int = DEFAULT_START_MS,
    disorder_ms: int = 0,
    **options: Any,
) -> list[Event]:
    """The whole history (eventTime in [start_ms, start_ms + duration_ms)) in arrival order.

    REGISTER events of one group share their topicConfigTable/dataVersion objects: treat the
    result as read-only.
    """
    return list(
        iter_history(
            seed, brokers, topics, duration_ms, period_ms, start_ms, disorder_ms, **options
        )
    )


def simulate_history(
    seed: int | str,
    brokers: int,
    topics: int,
    duration_ms: int,
    period_ms: int = DEFAULT_PERIOD_MS,
    start_ms: int = DEFAULT_START_MS,
    disorder_ms: int = 0,
    collectors: int = 0,
    **options: Any,
) -> tuple[list[Event], list[Fault]]:
    """Like generate_history, plus the log of injected faults."""
    sim = FleetSimulator(seed, brokers, topics, period_ms, start_ms, **options)
    events = list(
        iter_history(
            seed,
            brokers,
            topics,
            duration_ms,
            period_ms,
            start_ms,
            disorder_ms,
            simulator=sim,
            collectors=collectors,
        )
    )
    return events, sim.faults


def with_admin_events(
    events: list[Event], seed: int | str, every: int = 15, jitter_ms: int = 2_000
) -> list[Event]:
    """Interleave operators' events (contract §2) into a history, in arrival order: about one
    in `every` arrivals is followed by a WIPE/ADD_WRITE_PERM, DELETE_TOPIC (everywhere, in a
    cluster, or in an unknown one) or PUT/DELETE_KV on names seen so far (and sometimes unknown
    ones), timed within `jitter_ms` after the event it follows (keep it below the delay)."""
    rng = random.Random(f"admin-{seed}")
    brokers, clusters, topics = ["no-such-broker"], ["NoSuchCluster"], ["NoSuchTopic"]
    out: list[Event] = []
    for event in events:
        out.append(event)
        if event.get("eventType") == "REGISTER":
            for names, name in ((brokers, event["brokerName"]), (clusters, event["clusterName"])):
                if name not in names:
                    names.append(name)
            topics += [t for t in event["topicConfigTable"] if t not in topics]
        if rng.randrange(every):
            continue
        admin: Event = {
            "eventTime": event["eventTime"] + rng.randint(0, jitter_ms),
            "requestedBy": "10.0.5.5:40000",
        }
        kind = rng.choice(
            [
                "WIPE_WRITE_PERM",
                "ADD_WRITE_PERM",
                "DELETE_TOPIC",
                "DELETE_TOPIC",
                "PUT_KV",
                "DELETE_KV",
            ]
        )
        if kind in ("WIPE_WRITE_PERM", "ADD_WRITE_PERM"):
            admin["brokerName"] = rng.choice(brokers)
        elif kind == "DELETE_TOPIC":
            admin["topic"] = rng.choice(topics)
            cluster = rng.choice([None, "", *clusters])
            if cluster is not None:
                admin["clusterName"] = cluster
        else:
            admin.update(
                namespace=rng.choice(["ORDER_TOPIC_CONFIG", "team"]), key=rng.choice(topics[:4])
            )
            if kind == "PUT_KV":
                admin["value"] = f"v{rng.randrange(100)}"
        out.append({"eventType": kind, **admin})
    return out
