"""Keeps the served RouteIndex current: poll the Delta versions, build, swap.

Each poll pins the versions that show exactly the batches route_progress has published
(consistency.settled_versions) and builds the index of those versions from the served one,
reading only what changed (snapshots.next_index; a full read on the first load and when the
change feed cannot answer). Readers take `holder.current` once per request and use only that
object, so a request never mixes two snapshots; the refresher replaces it with one assignment
on the event loop. Blocking work (delta-rs reads, the build) runs in a worker thread.

Between two polls (every `poll_interval_s`), a local warehouse is watched for route_progress's
next commit file every CHANGE_CHECK_INTERVAL_S (one stat): a published batch starts a poll at
once instead of waiting up to a whole interval. The job publishes a batch by that commit
(its progress row, written last), so nothing the lookup serves changes without it; the polls
in between still catch the rest (maintenance commits, a table replaced). On object storage a
check would be a request per interval: there only the polls run.

The tables a build reads stay open from one build to the next (read/open_tables.py): a poll
finds a local table's latest version by the stat of its next commit file, and a build moves
an open table to its pinned version by reading the commits in between, instead of opening
(replaying the log of) a dozen tables per published batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from routing_lib import storage
from routing_lib.core.tables import PROGRESS
from routing_lib.lookup.consistency import SnapshotNotSettledError, settled_versions
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.shared_index import SharedIndexes
from routing_lib.lookup.snapshots import next_index
from routing_lib.read.open_tables import OpenTables, commit_file
from routing_lib.remoting.service_metrics import Metrics

log = logging.getLogger("routelake.lookup")
SWITCH_INTERVAL_S = 0.0005
# How often a local warehouse is checked for a newly published batch between polls: a stat of
# one file, so the served-after-commit delay is this plus the build, not the poll interval.
CHANGE_CHECK_INTERVAL_S = 0.05


@dataclass(frozen=True)
class Served:
    """One snapshot as served: the index plus its HTTP metadata, rendered once."""

    index: RouteIndex
    loaded_at: float  # time.time()
    headers: dict[str, str] = field(default_factory=dict)
    envelope_tail: bytes = b"}"  # `,"versions":{...},"watermark":W}`

    @staticmethod
    def of(index: RouteIndex, loaded_at: float | None = None) -> Served:
        versions = dict(sorted(index.versions.items()))
        headers = {
            "X-Routelake-Watermark": "none" if index.watermark is None else str(index.watermark),
            "X-Routelake-Versions": ",".join(f"{t}={v}" for t, v in versions.items()),
        }
        tail = (
            ',"versions":'
            + json.dumps(versions, separators=(",", ":"))
            + ',"watermark":'
            + json.dumps(index.watermark)
            + "}"
        ).encode()
        return Served(index, time.time() if loaded_at is None else loaded_at, headers, tail)


class SnapshotHolder:
    def __init__(self) -> None:
        self.current: Served | None = None

    def index_and_load_time(self) -> tuple[RouteIndex | None, float | None]:
        """The served index and when it loaded (what the metrics show); None, None before
        the first snapshot."""
        served = self.current
        return (served.index, served.loaded_at) if served is not None else (None, None)


class Refresher:
    def __init__(
        self,
        warehouse: str | Path,
        holder: SnapshotHolder,
        metrics: Metrics,
        support_acting_master: bool = False,
        order_message_enable: bool = False,
        shared: SharedIndexes | None = None,
    ) -> None:
        """`shared`: where the base index files live that this service's processes share
        (None: this process holds its own in memory)."""
        self.warehouse = warehouse
        self.shared = shared
        self.holder = holder
        self.metrics = metrics
        self.support_acting_master = support_acting_master
        self.order_message_enable = order_message_enable
        self._last_error: str | None = None
        self.change_check_interval_s = CHANGE_CHECK_INTERVAL_S
        self._next_progress_commit = _next_commit_check(warehouse)
        # the tables the builds read, kept open from one build to the next
        self.tables = OpenTables(warehouse)

    def published_since_served(self) -> bool:
        """Has route_progress committed after the served snapshot's version (one stat)?
        False before the first snapshot and on object storage: the polls find those."""
        served = self.holder.current
        if served is None or self._next_progress_commit is None:
            return False
        version = served.index.versions.get(PROGRESS)
        return version is not None and self._next_progress_commit(version)

    def _load(self) -> tuple[str, Served | None]:
        current = self.holder.current
        pinned, latest = settled_versions(self.warehouse, self.tables)
        if current is not None and pinned == dict(current.index.versions):
            if pinned != latest:
                # Normal while a micro-batch commits table by table: served at the next poll.
                raise SnapshotNotSettledError("a batch is committed in part; serving the last")
            return "unchanged", None
        started = time.perf_counter()
        built = next_index(
            self.warehouse,
            current.index if current else None,
            pinned,
            support_acting_master=self.support_acting_master,
            order_message_enable=self.order_message_enable,
            shared=self.shared,
            tables=self.tables,
        )
        # computed here, off the event loop, and kept up to date by the next builds
        built.index.route_count  # noqa: B018
        built.index.broker_topic_counts  # noqa: B018
        self.metrics.observe_build(built.how, time.perf_counter() - started)
        if built.reason and current is not None:
            log.info("full snapshot load: %s", built.reason)
        return "swapped", Served.of(built.index)

    async def refresh_once(self) -> str:
        """One poll. Never raises (except cancellation): on failure the last good index stays."""
        try:
            result, served = await asyncio.to_thread(self._load)
        except SnapshotNotSettledError as exc:
            self.metrics.refreshed("not_settled")
            # Normal while a micro-batch commits table by table: the next poll catches up.
            log.debug("snapshot not settled, keeping the current one: %s", exc)
            return "not_settled"
        except Exception as exc:  # any failure: keep serving the last good one
            self.tables.forget()
            self.metrics.refreshed("error")
            message = f"{type(exc).__name__}: {exc}"
            self.metrics.last_refresh_error = message
            if message != self._last_error:  # one line per distinct error, not per poll
                log.error("snapshot refresh failed, keeping the last good one: %s", message)
            self._last_error = message
            return "error"
        self._last_error = None
        if served is not None:
            previous = self.holder.current
            self.holder.current = served  # the swap: one reference assignment
            # debug once serving: a live job publishes a snapshot every second or so
            log.log(
                logging.DEBUG if previous else logging.INFO,
                "serving snapshot versions=%s watermark=%s (%d routes)%s",
                dict(served.index.versions),
                served.index.watermark,
                served.index.route_count,
                "" if previous else " - ready",
            )
        self.metrics.refreshed(result)
        return result

    async def run(self, poll_interval_s: float, stop: asyncio.Event) -> None:
        # The build runs in a thread and holds the GIL between its C calls; the event loop
        # waits for it up to the switch interval per request (5 ms by default): shorter
        # turns keep a request's latency well under that while a snapshot is built.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        while not stop.is_set():
            await self.refresh_once()
            await self._until_next_poll(poll_interval_s, stop)

    async def _until_next_poll(self, poll_interval_s: float, stop: asyncio.Event) -> None:
        """Wait `poll_interval_s`, or less: until a batch is published (checked every
        change_check_interval_s) or `stop`."""
        due = time.monotonic() + poll_interval_s
        while not stop.is_set():
            left = due - time.monotonic()
            if left <= 0:
                return
            step = min(left, self.change_check_interval_s)
            if self._next_progress_commit is None:
                step = left  # nothing cheap to check: wait for the poll
            try:
                await asyncio.wait_for(stop.wait(), timeout=step)
            except TimeoutError:
                pass
            if self.published_since_served():
                return


def _next_commit_check(warehouse: str | Path) -> Callable[[int], bool] | None:
    """For a local warehouse: whether route_progress has a commit after a version (the
    stat of its next commit file); None on object storage."""
    if storage.is_remote(warehouse):
        return None
    table = Path(warehouse) / PROGRESS  # as the reads open it

    def committed_after(version: int) -> bool:
        return Path(commit_file(table, version + 1)).exists()

    return committed_after
