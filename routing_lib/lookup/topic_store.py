"""Topic entries held compactly and replaced copy-on-write, a few shards at a time: the
lookup's per-process delta over the shared base index (route_topics.py: the topics topic_base
changed since that index was built), and the entry format the whole lookup uses.

A topic's entry is one flat tuple `(broker_name, queue, broker_name, queue, ...)` sorted by
broker name, where `queue` is an interned `(read, write, perm, sys_flag)` tuple: 1 M rows of a
fleet whose brokers share their topics cost a few tens of MB instead of a dict per row.
Topics are spread over `SHARDS` dicts by hash. An update copies only the shards it touches
and shares the others with the store it came from, so a snapshot that changes ten topics
costs ten shard copies, not a copy of every topic, and the store a reader holds never
changes under it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

Queue = tuple[int, int, int, int]  # read_queue_nums, write_queue_nums, perm, topic_sys_flag
# (broker_name, Queue, broker_name, Queue, ...) sorted by broker name; a tuple type cannot say
# "alternating", and unions would need a cast at every read of the hot lookup path
Entry = tuple[Any, ...]

_PERM_WRITE = 0x2
SHARDS = 256
_MASK = SHARDS - 1
# Few distinct queue settings exist in a fleet: one tuple object each, shared by every row.
_QUEUES: dict[Queue, Queue] = {}
_MAX_INTERNED = 100_000


def queue_of(read: int, write: int, perm: int, sys_flag: int) -> Queue:
    queue = (int(read), int(write), int(perm), int(sys_flag))
    shared = _QUEUES.get(queue)
    if shared is not None:
        return shared
    if len(_QUEUES) < _MAX_INTERNED:  # a bound: hostile values must not grow it forever
        _QUEUES[queue] = queue
    return queue


def entry_of(queues: Mapping[str, Queue]) -> Entry | None:
    """The entry of a topic whose queues are `queues` (broker name -> Queue, names interned
    by the caller); None if empty."""
    if not queues:
        return None
    names = sorted(queues)
    flat: list[str | Queue | None] = [None] * (2 * len(names))
    flat[0::2] = names
    flat[1::2] = [queues[name] for name in names]
    return tuple(flat)


def queues_of(entry: Entry | None) -> dict[str, Queue]:
    return {} if entry is None else dict(zip(entry[0::2], entry[1::2], strict=True))


class TopicStore:
    """Read-only once built: `replaced` returns a new store."""

    __slots__ = ("_shards", "_size", "row_count")

    def __init__(self, shards: tuple[dict[str, Entry], ...], size: int, row_count: int) -> None:
        self._shards = shards
        self._size = size
        self.row_count = row_count  # (topic, broker) rows: the table's size

    @staticmethod
    def build(rows: Iterable[tuple[str, str, Queue]]) -> TopicStore:
        """From (topic, broker_name, queue) rows sorted by topic then broker name (a later
        row with the same key wins, as a dict would have it)."""
        shards: tuple[dict[str, Entry], ...] = tuple({} for _ in range(SHARDS))
        topic: str | None = None
        names: list[str] = []
        queues: list[Queue] = []

        def flush() -> None:
            if topic is not None:
                flat: list[str | Queue] = []
                for name, queue in zip(names, queues, strict=True):
                    flat += (name, queue)
                shards[hash(topic) & _MASK][topic] = tuple(flat)

        for row_topic, name, queue in rows:
            if row_topic != topic:
                flush()
                topic, names, queues = row_topic, [], []
            if names and names[-1] == name:
                queues[-1] = queue
            else:
                names.append(sys.intern(name))
                queues.append(queue)
        flush()
        return TopicStore(
            shards,
            sum(len(s) for s in shards),
            sum(len(e) // 2 for s in shards for e in s.values()),
        )

    @staticmethod
    def of_rows(rows: Iterable[Mapping[str, Any]]) -> TopicStore:
        """From topic_queue_table rows in any order (hand-built snapshots, tests)."""
        keyed = sorted(
            ((r["topic"], r["broker_name"]), i, r) for i, r in enumerate(rows)
        )  # the index keeps equal keys in their order: the last one wins
        return TopicStore.build(
            (
                t,
                b,
                queue_of(
                    r["read_queue_nums"], r["write_queue_nums"], r["perm"], r["topic_sys_flag"]
                ),
            )
            for (t, b), _, r in keyed
        )

    @staticmethod
    def shard_of(topic: str) -> int:
        return hash(topic) & _MASK

    def get(self, topic: str) -> Entry | None:
        return self._shards[hash(topic) & _MASK].get(topic)

    def get_many(self, topics: Iterable[str]) -> list[Entry | None]:
        """`get` of each topic (one comprehension, no call per topic)."""
        shards = self._shards
        return [shards[hash(topic) & _MASK].get(topic) for topic in topics]

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and topic in self._shards[hash(topic) & _MASK]

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[str]:
        for shard in self._shards:
            yield from shard

    def items(self) -> Iterator[tuple[str, Entry]]:
        for shard in self._shards:
            yield from shard.items()

    def replaced(self, entries: Mapping[str, Entry | None]) -> TopicStore:
        """A store with these topics' entries replaced (None: the topic is gone); the shards
        no topic of `entries` falls in are shared with this store."""
        shards = list(self._shards)
        copied: set[int] = set()
        size, row_count = self._size, self.row_count
        for topic, entry in entries.items():
            i = hash(topic) & _MASK
            if i not in copied:
                shards[i] = dict(shards[i])
                copied.add(i)
            shard = shards[i]
            old = shard.get(topic)
            row_count -= 0 if old is None else len(old) // 2
            if entry is None:
                if old is not None:
                    del shard[topic]
                    size -= 1
            else:
                shard[topic] = entry
                size += old is None
                row_count += len(entry) // 2
        return TopicStore(tuple(shards), size, row_count)

    def shards(self) -> tuple[dict[str, Entry], ...]:
        """The shard dicts (read-only): a shard this store shares with the one it came from
        is the same object, so its topics are known to be unchanged."""
        return self._shards

    def values(self) -> Iterator[Entry]:
        for shard in self._shards:
            yield from shard.values()

    def group_write_counts(self) -> dict[str, tuple[int, int]]:
        """Per group name: (topics it has queue datas of, of which writable); as
        RouteTopics.group_write_counts counts them (a hand-built store's, row by row)."""
        counts: dict[str, list[int]] = {}
        for entry in self.values():
            for name, queue in zip(entry[0::2], entry[1::2], strict=True):
                slot = counts.setdefault(name, [0, 0])
                slot[0] += 1
                slot[1] += bool(queue[2] & _PERM_WRITE)
        return {name: (n, w) for name, (n, w) in counts.items() if n}
