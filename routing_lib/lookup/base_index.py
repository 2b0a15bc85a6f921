"""topic_base as the lookup holds it: topic -> holders (group, queue data), in flat arrays.

One `BaseIndex` is immutable and describes topic_base at one Delta version (issue 36): every
group's configured topic table, whether the group is present or not. The arrays live in one
Arrow IPC file (one record batch of one row whose columns are lists), so the worker
processes of `serve --workers N` map the same file (`shared_index.py`) instead of each
holding a copy; nothing here is a Python object per topic.

    topics        sorted, unique topic names (large_string)          T
    holder_start  CSR offsets: topic i's holders are [start[i], start[i+1])   T + 1
    holder_group  the holder's group (index into `groups`)                   H
    holder_queue  its queue data (index into the four queue columns)          H
    holder_topic  its topic id                                               H
    group_start   CSR offsets over `group_holders` by group                  G + 1
    group_holders holder ids ordered by group (what a group's fault flips)   H

Holders of a topic are ordered by group name (the order of a route's queueDatas). A topic is
found by binary search over `topics` (bytes order = code point order = Python's `sorted`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from routing_lib.lookup.topic_store import Entry, Queue, queue_of
from routing_lib.lookup.topics import SYSTEM_TOPIC_PREFIX, SYSTEM_TOPIC_SET

QUEUE_COLUMNS = ("read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag")
IntArray = npt.NDArray[np.int32]


def _int32(values: npt.NDArray[Any]) -> pa.Array:
    return pa.array(np.ascontiguousarray(values, dtype=np.int32))


def _one_row(columns: dict[str, pa.Array]) -> pa.RecordBatch:
    """A record batch of one row whose every column is a list holding one array."""
    lists = {}
    for name, values in columns.items():
        offsets = pa.array([0, len(values)], pa.int64())
        lists[name] = pa.LargeListArray.from_arrays(offsets, values)
    return pa.RecordBatch.from_pydict(lists)


def _numpy(array: pa.Array) -> IntArray:
    """A zero-copy numpy view of an int32 Arrow array without nulls (read-only)."""
    values: IntArray = array.to_numpy(zero_copy_only=True)
    return values


class BaseIndex:
    """Read-only. `arrays()` are the file's; `groups` and the queue objects are small Python
    lists made once per process (a few hundred groups, a few dozen queue settings)."""

    __slots__ = (
        "version",
        "table_id",
        "batch",
        "topic_count",
        "holder_count",
        "groups",
        "group_ids",
        "queues",
        "holder_start",
        "holder_group",
        "holder_queue",
        "holder_topic",
        "group_start",
        "group_holders",
        "_topics",
        "_offsets",
        "_data",
        "_start",
        "_hgroup",
        "_hqueue",
        "_system",
    )

    def __init__(self, batch: pa.RecordBatch, version: int, table_id: str = "") -> None:
        self.version = version  # topic_base's Delta version it describes
        self.table_id = table_id  # topic_base's Delta table id (a recreated table: another)
        self.batch = batch  # keeps the mapped buffers alive
        col = {name: batch.column(name).values for name in batch.schema.names}
        topics = col["topics"]
        self._topics: pa.LargeStringArray = topics
        self.topic_count = len(topics)
        self.holder_start: IntArray = _numpy(col["holder_start"])
        self.holder_group: IntArray = _numpy(col["holder_group"])
        self.holder_queue: IntArray = _numpy(col["holder_queue"])
        self.holder_topic: IntArray = _numpy(col["holder_topic"])
        self.group_start: IntArray = _numpy(col["group_start"])
        self.group_holders: IntArray = _numpy(col["group_holders"])
        self.holder_count = len(self.holder_group)
        self.groups: list[str] = [sys.intern(g) for g in col["groups"].to_pylist()]
        self.group_ids = {name: g for g, name in enumerate(self.groups)}
        self.queues: list[Queue] = [
            queue_of(*q) for q in zip(*(col[c].to_pylist() for c in QUEUE_COLUMNS), strict=True)
        ]
        # memoryviews for the per-request path: indexing one is cheaper than numpy's
        _, offsets, data = topics.buffers()
        first = topics.offset
        self._offsets = memoryview(offsets).cast("q")[first : first + self.topic_count + 1]
        self._data = memoryview(data) if data is not None else memoryview(b"")
        self._start = self.holder_start.data
        self._hgroup = self.holder_group.data
        self._hqueue = self.holder_queue.data
        self._system: npt.NDArray[np.int64] | None = None  # system_topic_ids, once found

    # -- building --

    @staticmethod
    def build(table: pa.Table, version: int, table_id: str = "") -> BaseIndex:
        """From topic_base's rows (any order, one per (topic, broker_name)), vectorised."""
        return BaseIndex(BaseIndex.record_batch(table), version, table_id)

    @staticmethod
    def record_batch(table: pa.Table) -> pa.RecordBatch:
        table = table.select(["topic", "broker_name", *QUEUE_COLUMNS])
        table = table.sort_by([("topic", "ascending"), ("broker_name", "ascending")])
        rows = table.num_rows
        topic = table.column("topic").combine_chunks().cast(pa.large_string())
        if rows:
            runs = pc.run_end_encode(topic, run_end_type=pa.int64())
            topics, run_ends = runs.values, runs.run_ends.to_numpy()
        else:
            topics, run_ends = topic, np.zeros(0, np.int64)
        holder_start = np.concatenate([[0], run_ends])
        holder_topic = np.repeat(np.arange(len(topics)), np.diff(holder_start))
        names = table.column("broker_name").combine_chunks().dictionary_encode()
        holder_group = names.indices.to_numpy(zero_copy_only=False)
        groups = names.dictionary
        queue_ids, queue_columns = _queue_ids(table)
        counts = np.bincount(holder_group, minlength=len(groups))
        group_start = np.concatenate([[0], np.cumsum(counts)])
        group_holders = np.argsort(holder_group, kind="stable")
        return _one_row(
            {
                "topics": topics,
                "holder_start": _int32(holder_start),
                "holder_group": _int32(holder_group),
                "holder_queue": _int32(queue_ids),
                "holder_topic": _int32(holder_topic),
                "groups": groups.cast(pa.large_string()),
                "group_start": _int32(group_start),
                "group_holders": _int32(group_holders),
                **queue_columns,
            }
        )

    # -- the file --

    def save(self, path: Path) -> None:
        """Write as an Arrow IPC file (the caller renames it into place)."""
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, self.batch.schema) as w:
            w.write_batch(self.batch)

    @staticmethod
    def mapped(path: Path, version: int, table_id: str = "") -> BaseIndex:
        """The index of an IPC file, memory-mapped: its pages are shared with every process
        that maps the same file (the mapping outlives the file's unlink)."""
        with pa.memory_map(str(path), "r") as source:
            batch = pa.ipc.open_file(source).get_batch(0)
            source.seek(0)
            _touch_every_page(source.read_buffer(source.size()))
        return BaseIndex(batch, version, table_id)

    # -- reads --

    def topic_name(self, i: int) -> str:
        offsets = self._offsets
        return bytes(self._data[offsets[i] : offsets[i + 1]]).decode()

    def find(self, topic: str) -> int:
        """The topic's id, or -1."""
        try:
            key = topic.encode()
        except UnicodeEncodeError:  # a lone surrogate: no stored topic has one
            return -1
        offsets, data = self._offsets, self._data
        lo, hi = 0, self.topic_count
        while lo < hi:
            mid = (lo + hi) >> 1
            if bytes(data[offsets[mid] : offsets[mid + 1]]) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.topic_count and bytes(data[offsets[lo] : offsets[lo + 1]]) == key:
            return lo
        return -1

    def find_many(self, topics: Sequence[str]) -> npt.NDArray[np.int64]:
        """Each topic's id, or -1: `find` for many topics at once, one vectorised binary
        search (the few dozen steps of all of them together, not a Python search each)."""
        if len(topics) < _FEW or not self.topic_count:
            return np.array([self.find(t) for t in topics], np.int64)
        try:
            keys = pa.array(topics, pa.large_string())
        except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate: search each
            return np.array([self.find(t) for t in topics], np.int64)
        offsets = np.frombuffer(self._offsets, np.int64)
        data = np.frombuffer(self._data, np.uint8)
        key_offsets = np.frombuffer(keys.buffers()[1], np.int64)[: len(keys) + 1]
        key_data = np.frombuffer(keys.buffers()[2] or b"", np.uint8)
        out = np.empty(len(keys), np.int64)
        longest = int(np.diff(key_offsets).max(initial=0))
        step = max(1, _SEARCH_CELLS // max(1, longest))  # bounds the (topics x bytes) arrays
        for first in range(0, len(keys), step):
            part = slice(first, min(len(keys), first + step) + 1)
            out[first : first + step] = _search(offsets, data, key_offsets[part], key_data)
        return out

    def entry(self, i: int) -> Entry:
        """Topic i's holders as a flat (group, queue, group, queue, ...) tuple."""
        groups, queues, hgroup, hqueue = self.groups, self.queues, self._hgroup, self._hqueue
        flat: list[str | Queue] = []
        for h in range(self._start[i], self._start[i + 1]):
            flat += (groups[hgroup[h]], queues[hqueue[h]])
        return tuple(flat)

    def topic_names(self, ids: npt.NDArray[Any] | None = None) -> list[str]:
        """The names of topic ids `ids` (all, in order, when None)."""
        topics = self._topics if ids is None else self._topics.take(pa.array(ids))
        names: list[str] = topics.to_pylist()
        return names

    def topic_array(self) -> pa.LargeStringArray:
        return self._topics

    def system_topic_ids(self) -> npt.NDArray[np.int64]:
        """The ids of the topics RocketMQ's TopicValidator calls system topics: found once
        per base index (a string scan of every topic name, ~120 ms at 3 M topics), where
        every snapshot over this base asks again after a fault (getSystemTopicList, the
        route risks)."""
        if self._system is None:
            topics = self._topics
            system = pc.or_(
                pc.starts_with(topics, SYSTEM_TOPIC_PREFIX),
                pc.is_in(topics, value_set=pa.array(sorted(SYSTEM_TOPIC_SET), pa.large_string())),
            )
            self._system = np.flatnonzero(system.to_numpy(zero_copy_only=False))
        return self._system

    def holders_of_group(self, g: int) -> npt.NDArray[Any]:
        return self.group_holders[self.group_start[g] : self.group_start[g + 1]]

    def topic_ids(self, names: Sequence[str]) -> npt.NDArray[Any]:
        """The ids of those of `names` in the index (a binary search each: a covered list or
        the system topics, never the whole table)."""
        found = [i for i in map(self.find, names) if i >= 0]
        return np.array(found, np.int64)


_FEW = 64  # fewer topics than this: a binary search each costs less than the arrays
_SEARCH_CELLS = 1 << 22  # topics x longest name per chunk of find_many


def _padded(
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    width: int,
) -> npt.NDArray[np.uint64]:
    """The strings data[starts[i]:ends[i]] as rows of `width` bytes, zeros after the end,
    read as big-endian 64-bit words (`width` a multiple of 8): rows compare as the strings
    do, but for a tie of two strings one of which is the other plus NUL bytes (the shorter
    is less: compare the lengths then)."""
    cols = np.arange(width)
    at = starts[:, None] + cols
    outside = cols >= (ends - starts)[:, None]
    if len(data):
        np.minimum(at, len(data) - 1, out=at)
        rows = data[at]
    else:
        rows = np.zeros(at.shape, np.uint8)
    rows[outside] = 0
    words: npt.NDArray[np.uint64] = rows.view(">u8").astype(np.uint64)
    return words


def _compare(
    a: npt.NDArray[np.uint64],
    a_len: npt.NDArray[np.int64],
    b: npt.NDArray[np.uint64],
    b_len: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Row by row: a < b and a == b, as the strings compare (Python's and Arrow's order)."""
    differ = a != b
    has = differ.any(axis=1)
    first = differ.argmax(axis=1)
    rows = np.arange(len(a))
    less = np.where(has, a[rows, first] < b[rows, first], a_len < b_len)
    return less, ~has & (a_len == b_len)


def _search(
    offsets: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    key_offsets: npt.NDArray[np.int64],
    key_data: npt.NDArray[np.uint8],
) -> npt.NDArray[np.int64]:
    """The ids of the keys (an Arrow string array's offsets and data) among the sorted
    strings of `offsets`/`data` (-1: not there), all keys searched together: a string longer
    than the longest key is compared by its first bytes and its length."""
    count = len(offsets) - 1
    width = max(8, -(-int(np.diff(key_offsets).max(initial=0)) // 8) * 8)
    keys = _padded(key_offsets[:-1], key_offsets[1:], key_data, width)
    key_len = np.diff(key_offsets)
    lo, hi = np.zeros(len(keys), np.int64), np.full(len(keys), count, np.int64)
    active = np.arange(len(keys))
    while len(active):
        mid = (lo[active] + hi[active]) >> 1
        starts, ends = offsets[mid], offsets[mid + 1]
        probe = _padded(starts, np.minimum(ends, starts + width), data, width)
        less, _ = _compare(probe, ends - starts, keys[active], key_len[active])
        lo[active] = np.where(less, mid + 1, lo[active])
        hi[active] = np.where(less, hi[active], mid)
        active = active[lo[active] < hi[active]]
    at = np.minimum(lo, count - 1)
    starts, ends = offsets[at], offsets[at + 1]
    probe = _padded(starts, np.minimum(ends, starts + width), data, width)
    _, equal = _compare(probe, ends - starts, keys, key_len)
    return np.where((lo < count) & equal, lo, -1)


PAGE_BYTES = 4096


def _touch_every_page(buffer: pa.Buffer) -> None:
    """Read a byte of each page of a mapped file (zero-copy buffer): the pages are in memory
    anyway (a /dev/shm file), this maps them into this process now (~10 ms per 40 MB), so
    its RSS counts the index from the first snapshot on instead of growing as requests touch
    it, and no request waits for a page fault."""
    if buffer.size:
        np.frombuffer(buffer, np.uint8)[::PAGE_BYTES].max()


def _queue_ids(table: pa.Table) -> tuple[npt.NDArray[Any], dict[str, pa.Array]]:
    """Each row's queue setting as an id into a small table of distinct settings (a few
    dozen in a fleet): packed into one int64 per row when every value fits 16 bits (real
    brokers' do), else unique over the four columns."""
    columns = [table.column(c).combine_chunks().fill_null(0) for c in QUEUE_COLUMNS]
    values = [c.to_numpy().astype(np.int64) for c in columns]
    if not len(values[0]):
        distinct, inverse = np.zeros((0, 4), np.int64), np.zeros(0, np.int64)
    elif all(v.min() >= 0 and v.max() <= 0xFFFF for v in values):
        packed = (values[0] << 48) | (values[1] << 32) | (values[2] << 16) | values[3]
        keys, inverse = np.unique(packed, return_inverse=True)
        distinct = np.stack(
            [keys >> 48, (keys >> 32) & 0xFFFF, (keys >> 16) & 0xFFFF, keys & 0xFFFF], axis=1
        )
    else:
        distinct, inverse = np.unique(np.stack(values, axis=1), axis=0, return_inverse=True)
    out = {name: _int32(distinct[:, k]) for k, name in enumerate(QUEUE_COLUMNS)}
    return inverse.reshape(-1), out
