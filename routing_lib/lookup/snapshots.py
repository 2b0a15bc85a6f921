"""Build the next RouteIndex from the warehouse: in proportion to what changed when it can.

`load_index` reads every table at pinned versions (the first load, and the fall-back).
`next_index` starts from the served index: topic_queue_table's change feed between the
served version and the new one gives the (topic, broker) rows that changed, and only those
topics get new entries (TopicStore copies only the shards they fall in). The other route
tables are sized by brokers, not topics: a changed one is read whole at its new version
(liveness changes every batch: a few hundred rows). Everything else is shared with the
served index, which is never modified: a reader holding it sees one snapshot throughout.

Falls back to `load_index` when the change feed cannot answer (not enabled on a version,
files or commits cleaned up) or when more rows changed than `max_change_fraction` of those
held and more than `min_full_rows` (a whole-table overwrite, a new fleet): then a full read
is the cheaper way.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from routing_lib.core.catalog import TOPIC_QUEUE
from routing_lib.core.tables import PROGRESS, Row
from routing_lib.lookup.routes import SMALL_TABLES, RouteIndex
from routing_lib.lookup.topic_store import (
    SHARDS,
    Entry,
    Queue,
    TopicStore,
    entry_of,
    queue_of,
    queues_of,
)
from routing_lib.read.warehouse import (
    ChangesUnavailableError,
    read_changes,
    read_version,
    read_watermark,
)

QUEUE_COLUMNS = ("read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag")
_REMOVES = frozenset({"delete", "update_preimage"})  # applied before a commit's inserts


@dataclass(frozen=True)
class Built:
    index: RouteIndex
    how: str  # "full" or "incremental"
    reason: str = ""  # why a full load where an incremental one was possible
    changed_rows: int = 0  # topic_queue_table rows the change feed gave
    changed_topics: int = 0


def store_of(table: pa.Table) -> TopicStore:
    """A TopicStore from topic_queue_table's Arrow columns, without a Python object per row
    where Arrow can do it: sorted by (topic, broker) and run-end encoded by topic, each
    topic's entry is two list slices interleaved; broker names and queue settings come from
    dictionaries (a few hundred distinct values for a million rows)."""
    if table.num_rows == 0:
        return TopicStore.build(())
    table = table.sort_by([("topic", "ascending"), ("broker_name", "ascending")])
    runs = pc.run_end_encode(table.column("topic").combine_chunks())
    run_ends, topics = runs.run_ends.to_pylist(), runs.values.to_pylist()
    brokers = table.column("broker_name").combine_chunks().dictionary_encode()
    names = [sys.intern(n) for n in brokers.dictionary.to_pylist()]
    broker_list = [names[i] for i in brokers.indices.to_pylist()]
    queue_list = _queue_list(table)
    del table, brokers, runs  # the Arrow buffers are not needed past here
    shards: list[dict[str, Entry]] = [{} for _ in range(SHARDS)]
    start = 0
    for topic, end in zip(topics, run_ends, strict=True):
        flat: list[str | Queue | None] = [None] * (2 * (end - start))
        flat[0::2] = broker_list[start:end]
        flat[1::2] = queue_list[start:end]
        shards[TopicStore.shard_of(topic)][topic] = tuple(flat)
        start = end
    return TopicStore(tuple(shards), len(topics), len(broker_list))


def _queue_list(table: pa.Table) -> list[Queue]:
    """Each row's Queue, one shared tuple per distinct setting."""
    columns = [table.column(c).combine_chunks() for c in QUEUE_COLUMNS]
    if all(pc.min(c).as_py() >= 0 and pc.max(c).as_py() <= 0xFFFF for c in columns):
        packed = columns[0].cast(pa.int64())
        for column in columns[1:]:  # 16 bits each: one int64 key per distinct setting
            packed = pc.add(pc.shift_left(packed, 16), column.cast(pa.int64()))
        codes = packed.dictionary_encode()
        queues = [
            queue_of(k >> 48, (k >> 32) & 0xFFFF, (k >> 16) & 0xFFFF, k & 0xFFFF)
            for k in codes.dictionary.to_pylist()
        ]
        return [queues[i] for i in codes.indices.to_pylist()]
    # values outside 0..65535 (not a real broker's): row by row
    return list(map(queue_of, *(c.to_pylist() for c in columns)))


def _give_back_memory() -> None:
    """Return the freed buffers of a whole-table read to the system (Arrow's pool and the C
    heap keep them otherwise: ~100 MB after reading 1 M rows)."""
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _small_rows(warehouse: str | Path, table: str, versions: Mapping[str, int]) -> list[Row]:
    if table not in versions:
        return []  # an optional table an older warehouse lacks
    rows: list[Row] = read_version(warehouse, table, versions[table]).to_pylist()
    return rows


def load_index(
    warehouse: str | Path,
    versions: Mapping[str, int],
    *,
    support_acting_master: bool = False,
    order_message_enable: bool = False,
) -> RouteIndex:
    """Every table read whole at `versions`."""
    store = store_of(read_version(warehouse, TOPIC_QUEUE, versions[TOPIC_QUEUE]))
    _give_back_memory()
    return RouteIndex.assemble(
        store,
        {t: _small_rows(warehouse, t, versions) for t in SMALL_TABLES},
        versions,
        read_watermark(warehouse, versions[PROGRESS]),
        support_acting_master=support_acting_master,
        order_message_enable=order_message_enable,
    )


def changed_entries(store: TopicStore, changes: pa.Table) -> dict[str, Entry | None]:
    """The new entries of the topics the change-feed rows touch, applied commit by commit
    (a commit's removals before its inserts: an overwrite removes and adds the same key);
    topics whose entry came out unchanged are left out."""
    n = changes.num_rows
    if n == 0:
        return {}
    cols = {
        c: changes.column(c).to_pylist()
        for c in ("topic", "broker_name", "_change_type", "_commit_version", *QUEUE_COLUMNS)
    }
    kinds, versions = cols["_change_type"], cols["_commit_version"]
    order = sorted(range(n), key=lambda i: (versions[i], kinds[i] not in _REMOVES))
    work: dict[str, dict[str, Queue]] = {}
    topics, brokers = cols["topic"], cols["broker_name"]
    reads, writes = cols["read_queue_nums"], cols["write_queue_nums"]
    perms, flags = cols["perm"], cols["topic_sys_flag"]
    for i in order:
        topic = topics[i]
        queues = work.get(topic)
        if queues is None:
            queues = work[topic] = queues_of(store.get(topic))
        if kinds[i] in _REMOVES:
            queues.pop(brokers[i], None)
        else:
            queues[sys.intern(brokers[i])] = queue_of(reads[i], writes[i], perms[i], flags[i])
    entries = {t: entry_of(q) for t, q in work.items()}
    return {t: e for t, e in entries.items() if e != store.get(t)}


def next_index(
    warehouse: str | Path,
    current: RouteIndex | None,
    versions: Mapping[str, int],
    *,
    support_acting_master: bool = False,
    order_message_enable: bool = False,
    max_change_fraction: float = 0.25,
    min_full_rows: int = 1000,
) -> Built:
    """The index of `versions` (pinned, settled), from `current` where possible."""
    flags = {
        "support_acting_master": support_acting_master,
        "order_message_enable": order_message_enable,
    }

    def full(reason: str) -> Built:
        return Built(load_index(warehouse, versions, **flags), "full", reason)

    if current is None:
        return full("first load")
    if (current.support_acting_master, current.order_message_enable) != (
        support_acting_master,
        order_message_enable,
    ):
        return full("other route options")
    served = current.versions
    old, new = served.get(TOPIC_QUEUE), versions[TOPIC_QUEUE]
    if old is None or new < old:
        return full(f"{TOPIC_QUEUE} version {old} -> {new}")
    store, changed, rows = current.store, frozenset[str](), 0
    if new != old:
        try:
            changes = read_changes(warehouse, TOPIC_QUEUE, old + 1, new)
        except ChangesUnavailableError as exc:
            return full(f"no change feed: {exc}")
        rows = changes.num_rows
        if rows > max(min_full_rows, max_change_fraction * store.row_count):
            return full(f"{rows} changed rows of {store.row_count}")
        entries = changed_entries(store, changes)
        store, changed = store.replaced(entries), frozenset(entries)
    small = {
        t: _small_rows(warehouse, t, versions)
        for t in SMALL_TABLES
        if versions.get(t) != served.get(t)
    }
    watermark = (
        current.watermark
        if versions[PROGRESS] == served.get(PROGRESS)
        else read_watermark(warehouse, versions[PROGRESS])
    )
    index = RouteIndex.assemble(
        store,
        small,
        versions,
        watermark,
        previous=current,
        changed_topics=changed,
        **flags,
    )
    return Built(index, "incremental", changed_rows=rows, changed_topics=len(changed))
