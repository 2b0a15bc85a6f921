"""What the console shows of one served snapshot, computed on first use and kept until the
lookup serves a newer one: the live fleet, the topic name index, and State(T) for the last
few times asked. Everything comes from the snapshot's settled route tables and the history
tables pinned to the same batch (pins.py), so one answer never mixes two batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from routing_lib.console import fleet as fleet_view
from routing_lib.console import timing
from routing_lib.console.pins import TableCache, pin_versions
from routing_lib.console.search import NamesMemo, TopicNames
from routing_lib.core.as_of import live_brokers_as_of, route_rows_as_of
from routing_lib.core.catalog import (
    BROKER_ADDR,
    CLUSTER_ADDR,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
)
from routing_lib.core.group_routes import PERM_WRITE
from routing_lib.core.history import (
    BROKER_LIVENESS_EVENTS,
    BROKER_MEMBERSHIP_HISTORY,
    CLUSTER_MEMBERSHIP_HISTORY,
)
from routing_lib.core.tables import PROGRESS, Row
from routing_lib.lookup.refresher import Served, SnapshotHolder
from routing_lib.lookup.routes import RouteIndex
from routing_lib.read import route_history
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.warehouse import WarehouseSnapshot

log = logging.getLogger("routelake.console")

JsonObj = dict[str, Any]
AT_CACHE = 8  # State(T) kept per snapshot: a person going back and forth between times


class TimeOutOfRange(ValueError):
    """T is past the published watermark: the history is not final there yet."""


class AtState:
    """State(T) rebuilt from the history tables, as `routectl as-of --at T` rebuilds it (the
    core's route_rows_as_of and live_brokers_as_of; topicQueueTable from the base rows and
    overlays valid at T, read/route_history.routes_at). The topic routes of State(T) stay
    Arrow (millions of rows at scale): the fleet counts them with Arrow, the search index
    takes their names, and a topic's route is built, when asked, from its own rows by the
    lookup's RouteIndex."""

    def __init__(self, snapshot: Snapshot, at: int) -> None:
        self.at = at
        small = {
            name: snapshot.rows(name, lambda d: pc.less_equal(d["valid_from"], at))
            for name in (BROKER_MEMBERSHIP_HISTORY, CLUSTER_MEMBERSHIP_HISTORY)
        }
        rows = route_rows_as_of(small, at)
        self._groups = {BROKER_ADDR: rows[BROKER_ADDR], CLUSTER_ADDR: rows[CLUSTER_ADDR]}
        self.index = RouteIndex(WarehouseSnapshot(dict(self._groups), {}, at))  # no topics
        # State(T)'s topic_queue_table rows (the last base row and overlay at or before T per
        # group and topic: no history derived); the fleet and the search index need three
        # columns of them
        self._routes = route_history.routes_at(snapshot.changes(at_any_t=True), at)
        self.topics = self._routes.select(["topic", "broker_name", "perm"])
        events = snapshot.rows(BROKER_LIVENESS_EVENTS, lambda d: pc.less_equal(d["event_time"], at))
        live: dict[tuple[str, str], JsonObj] = {
            (b["clusterName"], b["brokerAddr"]): {} for b in live_brokers_as_of(events, at)
        }
        names = self.topics["topic"].unique().to_pylist()
        self.names = TopicNames(names)
        self.fleet = fleet_view.fleet(
            self.index,
            live,
            fleet_view.alive_since(events, at),
            perms=_write_counts(self.topics),
            topic_count=len(names),
        )

    def route(self, topic: str) -> JsonObj | None:
        """The TopicRouteData a client would have got at T."""
        queues = self._routes.filter(pc.equal(self._routes["topic"], topic)).to_pylist()
        tables = {**self._groups, TOPIC_QUEUE: queues}
        return RouteIndex(WarehouseSnapshot(tables, {}, self.at)).route(topic)


def _with_next_change(keys: list[str]) -> Callable[[pa.Table], pa.Table]:
    def with_next_change(table: pa.Table) -> pa.Table:
        return route_history.with_next_change(table, keys)

    return with_next_change


def _write_counts(topics: pa.Table | None) -> dict[str, tuple[int, int]]:
    """broker group -> (topic routes, of which with the write bit), counted by Arrow."""
    if topics is None or not topics.num_rows:
        return {}
    writable = pc.not_equal(pc.bit_wise_and(topics["perm"], PERM_WRITE), 0)
    counts = (
        pa.table({"broker_name": topics["broker_name"], "writable": pc.cast(writable, pa.int64())})
        .group_by("broker_name")
        .aggregate([("writable", "count"), ("writable", "sum")])
        .to_pylist()
    )
    return {r["broker_name"]: (r["writable_count"], r["writable_sum"]) for r in counts}


class Snapshot:
    def __init__(
        self,
        served: Served,
        cache: TableCache,
        memo: NamesMemo,
        write_counts: fleet_view.WriteCounts,
    ) -> None:
        self.served = served
        self.index = served.index
        self.cache = cache
        self.memo = memo
        self.write_counts = write_counts
        self._lock = threading.RLock()  # lazily built parts are built once
        self._pins: dict[str, int | None] | None = None
        self._fleet: JsonObj | None = None
        self._names: TopicNames | None = None
        self._at: OrderedDict[int, AtState] = OrderedDict()

    @property
    def version(self) -> int:
        return self.index.versions[PROGRESS]

    @property
    def watermark(self) -> int:
        assert self.index.watermark is not None  # Console.snapshot() hands out no empty one
        return self.index.watermark

    def info(self) -> JsonObj:
        """The header every answer carries: which snapshot it shows."""
        now = int(time.time() * 1000)
        return {
            "version": self.version,
            "versions": dict(sorted(self.index.versions.items())),
            "watermark": self.watermark,
            "lagMs": now - self.watermark,
            "loadedAt": int(self.served.loaded_at * 1000),
            "span": {"from": self.history_start(), "to": self.watermark},
        }

    # -- tables --

    def pins(self) -> dict[str, int | None]:
        with self._lock:
            if self._pins is None:
                with timing.part("pins"):
                    self._pins = pin_versions(
                        self.cache.warehouse, self.version, self.cache.latest_version
                    )
            return self._pins

    def table(self, name: str) -> pa.Table | None:
        return self.cache.get(name, self.pins()[name])

    def changes(self, at_any_t: bool = False) -> route_history.ChangeTables:
        """The pinned change tables topic_route_history derives from (empty when absent);
        `at_any_t`: with their next-change column (computed once per table version: every
        State(T) is then a mask)."""
        pins = self.pins()
        tables = []
        for name, keys in (
            (TOPIC_BASE_CHANGES, route_history.BASE_KEYS),
            (TOPIC_OVERLAY_CHANGES, route_history.OVERLAY_KEYS),
        ):
            if at_any_t:
                data = self.cache.prepared(name, pins[name], _with_next_change(keys))
            else:
                data = self.table(name)
            tables.append(arrow_schema(name).empty_table() if data is None else data)
        return route_history.ChangeTables(*tables)

    def rows(self, name: str, mask: Any = None) -> list[Row]:
        """A pinned table's rows (where `mask(table)` is true); [] for an absent table."""
        data = self.table(name)
        if data is None:
            return []
        rows: list[Row] = (data.filter(mask(data)) if mask is not None else data).to_pylist()
        return rows

    def history_start(self) -> int:
        """The earliest time the history knows: the start of the time control."""
        starts = []
        for name, column in (
            (BROKER_MEMBERSHIP_HISTORY, "valid_from"),
            (BROKER_LIVENESS_EVENTS, "event_time"),
        ):
            data = self.table(name)
            if data is not None and data.num_rows:
                starts.append(pc.min(data[column]).as_py())
        return min(starts, default=self.watermark)

    # -- live --

    def fleet(self) -> JsonObj:
        with self._lock:
            if self._fleet is None:
                events = self.rows(BROKER_LIVENESS_EVENTS)
                with timing.part("fleet"):
                    live = {(b["clusterName"], b["brokerAddr"]): b for b in self.index.live_brokers}
                    since = fleet_view.alive_since(events, self.watermark)
                    perms = self.write_counts.of(self.index.store)
                    self._fleet = fleet_view.fleet(self.index, live, since, perms)
            return self._fleet

    def names(self) -> TopicNames:
        with self._lock:
            if self._names is None:
                self._names = self.memo.get(tuple(self.index.topics))
            return self._names

    # -- State(T) --

    def at(self, t: int) -> AtState:
        if t > self.watermark:
            raise TimeOutOfRange(
                f"{t} is after the published watermark {self.watermark}: "
                "the history is not final there yet"
            )
        with self._lock:
            state = self._at.get(t)
            if state is None:
                with timing.part("state"):
                    state = AtState(self, t)
                self._at[t] = state
                while len(self._at) > AT_CACHE:
                    self._at.popitem(last=False)
            self._at.move_to_end(t)
            return state

    # -- timelines --

    def topic_rows(self, topic: str) -> list[Row]:
        """One topic's topic_route_history rows, derived from its base changes and its
        groups' overlay changes."""
        return route_history.history_rows(route_history.of_topic(self.changes(), topic))

    def broker_rows(self, name: str) -> tuple[list[Row], list[Row]]:
        """(membership rows, liveness events) of one broker group."""
        same = lambda d: pc.equal(d["broker_name"], name)  # noqa: E731
        return self.rows(BROKER_MEMBERSHIP_HISTORY, same), self.rows(BROKER_LIVENESS_EVENTS, same)

    def cluster_rows(self) -> list[Row]:
        return self.rows(CLUSTER_MEMBERSHIP_HISTORY)


class Console:
    """The console's view of the lookup's current snapshot."""

    def __init__(self, holder: SnapshotHolder, warehouse: str | Path) -> None:
        self.holder = holder
        self.cache = TableCache(warehouse)
        self.memo = NamesMemo()
        self.write_counts = fleet_view.WriteCounts()
        self._current: Snapshot | None = None
        self._lock = threading.Lock()
        self.warmed: Served | None = None  # the latest served snapshot keep_warm prepared

    async def keep_warm(self, stop: asyncio.Event, poll_interval_s: float = 0.25) -> None:
        """Build each new snapshot's fleet as soon as the lookup serves it, so the first page
        asking for it finds it made: at 300 groups x 10 000 topics the first count of writable
        routes is ~0.8 s of CPU, and after that only the topics a batch changed are counted."""
        while not stop.is_set():
            served = self.holder.current
            if served is not self.warmed:
                try:
                    await asyncio.to_thread(self._warm)
                except Exception:  # a page asking later builds it (or says what failed)
                    log.warning("console: could not prepare the fleet view", exc_info=True)
                self.warmed = served
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_interval_s)

    def _warm(self) -> None:
        snapshot = self.snapshot()
        if snapshot is not None:
            snapshot.fleet()

    def snapshot(self) -> Snapshot | None:
        """None until the lookup serves a snapshot with a published batch."""
        served = self.holder.current  # read once: every part of an answer uses this one
        if served is None or served.index.watermark is None:
            return None
        with self._lock:
            if self._current is None or self._current.served is not served:
                self._current = Snapshot(served, self.cache, self.memo, self.write_counts)
            return self._current
