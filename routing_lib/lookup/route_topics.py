"""topicQueueTable of one snapshot, derived at read time from topic_base + topic_overlay.

RocketMQ's pickupTopicRouteData reads a topic's queue datas from topicQueueTable; here a
topic's holders come from the base index (`BaseIndex`, shared between processes, plus a
small per-process `delta` of the topics topic_base changed since that index was built), and
each holder's group overlay (core/overlay.py) decides at read time whether it is there
(`present`, `covered`) and with which perm (`perm_op`). So a fault of a 10 000-topic group is
one overlay row: no topic's entry is rebuilt.

What lists topics (getAllTopicList, TOPIC_NOT_EXIST, counts) needs a per-topic count of
present holders: `counts` (one int per base topic) and `present` (one flag per base holder)
are updated by one vectorised add over the flipped group's holders per flip. The values are
immutable once built: `changed` returns a new RouteTopics sharing whatever did not change.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from routing_lib.core.overlay import PERM_WRITE, TRIVIAL, Overlay, PermOp
from routing_lib.lookup.base_index import BaseIndex
from routing_lib.lookup.topic_store import Entry, Queue, TopicStore, queue_of
from routing_lib.lookup.topics import SYSTEM_TOPIC_PREFIX, SYSTEM_TOPIC_SET

NO_OVERLAYS: Mapping[str, Overlay] = MappingProxyType({})
GroupCounts = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]  # per group id: two counts
_EMPTY_DELTA = TopicStore.build(())
GONE: Entry = ()  # in the delta: a base topic topic_base no longer has


def _present_mask(base: BaseIndex, holders: npt.NDArray[Any], overlay: Overlay) -> npt.NDArray[Any]:
    """Which of a group's holders its overlay leaves in topicQueueTable."""
    if not overlay.present:
        return np.zeros(len(holders), np.uint8)
    if overlay.covered is None:
        return np.ones(len(holders), np.uint8)
    covered = base.topic_ids(sorted(overlay.covered))
    return np.isin(base.holder_topic[holders], covered).astype(np.uint8)


def _holders_of_topics(base: BaseIndex, topics: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """The holder ids of these base topics (each topic's range of the CSR offsets)."""
    starts = base.holder_start[topics].astype(np.int64)
    lengths = base.holder_start[topics + 1] - starts
    firsts = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return firsts + np.arange(int(lengths.sum()), dtype=np.int64)


@dataclass(frozen=True)
class Holders:
    """The holders of a list of topics, one row each, flat: row r is a holder of topic
    `topic[r]` (an index into the list) of group `names[group[r]]` with queue data
    `queues[queue[r]]`; a topic's rows are together, in its entry's order (by group name).
    `ids`: each topic's id in the base index (-1: none; or not searched: a topic the delta
    holds, unless the caller gave them). Distinct names and queue datas have distinct
    indexes (rows compare by index)."""

    topic: npt.NDArray[np.int64]
    group: npt.NDArray[np.int64]
    queue: npt.NDArray[np.int64]
    names: list[str]
    queues: list[Queue]
    ids: npt.NDArray[np.int64]

    def per_topic(self, count: int) -> npt.NDArray[np.int64]:
        """How many rows each of the `count` topics has."""
        return np.bincount(self.topic, minlength=count)


class Catalog:
    """Indexes of group names and queue datas, the base index's first (its ids), extended
    with those it lacks."""

    def __init__(self, base: BaseIndex) -> None:
        self.names = list(base.groups)
        self.name_ids = dict(base.group_ids)
        self.queues = list(base.queues)
        self.queue_ids = {q: i for i, q in enumerate(self.queues)}

    def name(self, name: str) -> int:
        i = self.name_ids.get(name)
        if i is None:
            i = self.name_ids[name] = len(self.names)
            self.names.append(sys.intern(name))
        return i

    def queue(self, queue: Queue) -> int:
        i = self.queue_ids.get(queue)
        if i is None:
            i = self.queue_ids[queue] = len(self.queues)
            self.queues.append(queue)
        return i


class DeltaWriteCounts:
    """RouteTopics.group_write_counts' part of the delta's topics, per shard of the delta
    and summed: a shard the store shares with `last`'s (the same dict: copy on write) keeps
    its counts while the overlays are the same, so after a base change of 10 000 topics a
    snapshot counts again only the shards its own changes touched."""

    def __init__(self, topics: RouteTopics, last: DeltaWriteCounts | None = None) -> None:
        self.special = dict(topics.special)
        self.shards = topics.delta.shards()
        self.totals: dict[str, tuple[int, int]] = {}
        carries = last is not None and last.special == self.special
        totals: dict[str, list[int]] = (
            {g: [a, b] for g, (a, b) in last.totals.items()} if last is not None and carries else {}
        )
        self.per_shard: list[dict[str, tuple[int, int]]] = []
        for i, shard in enumerate(self.shards):
            if last is not None and carries and last.shards[i] is shard:
                self.per_shard.append(last.per_shard[i])
                continue
            counts = topics.delta_write_counts(shard)
            self.per_shard.append(counts)
            if last is not None and carries:
                for name, (a, b) in last.per_shard[i].items():
                    totals[name][0] -= a
                    totals[name][1] -= b
            for name, (a, b) in counts.items():
                slot = totals.setdefault(name, [0, 0])
                slot[0] += a
                slot[1] += b
        self.totals = {g: (a, b) for g, (a, b) in totals.items() if a or b}


def _count_type(base: BaseIndex) -> type[np.signedinteger[Any]]:
    """The narrowest type the per-topic counts fit: a topic has at most one holder per group
    (int16: 6 MB at 3 M topics where int32 took 12, per snapshot and per process)."""
    return np.int16 if len(base.groups) <= np.iinfo(np.int16).max else np.int32


class RouteTopics:
    """Read-only: `get` answers as TopicStore.get did for topic_queue_table's rows."""

    __slots__ = (
        "base",
        "delta",
        "overlays",
        "special",
        "present",
        "counts",
        "shadow",
        "_visible",
        "_holders",
        "_len",
        "arrays_key",
    )

    def __init__(
        self,
        base: BaseIndex,
        delta: TopicStore,
        overlays: Mapping[str, Overlay],
        present: npt.NDArray[Any],
        counts: npt.NDArray[Any],
        shadow: npt.NDArray[Any],
        arrays_key: str | None = None,
    ) -> None:
        self.base = base
        self.delta = delta  # topic -> base entry for topics changed since `base` (GONE: left)
        self.overlays = overlays  # group -> overlay; a group without one has a trivial one
        # only the non-trivial ones: a topic none of whose groups is here reads as stored
        self.special = {g: o for g, o in overlays.items() if not o.is_trivial()}
        self.present = present  # per base holder: 1 when its group's overlay keeps it
        self.counts = counts  # per base topic: its present holders
        self.shadow = shadow  # per base topic: True when the delta holds it instead
        self._visible: npt.NDArray[Any] | None = None
        self._holders: npt.NDArray[np.bool_] | None = None
        self._len: int | None = None
        # `present` and `counts` are the views of the service's shared file of this key
        # (shared_index.SharedIndexes.arrays); None: this process's own arrays
        self.arrays_key = arrays_key

    def with_arrays(
        self, present: npt.NDArray[Any], counts: npt.NDArray[Any], key: str
    ) -> RouteTopics:
        """The same topics over equal `present` and `counts` arrays (the shared file's)."""
        return RouteTopics(self.base, self.delta, self.overlays, present, counts, self.shadow, key)

    @staticmethod
    def of(base: BaseIndex, overlays: Mapping[str, Overlay] = NO_OVERLAYS) -> RouteTopics:
        present = np.ones(base.holder_count, np.uint8)
        for group, overlay in overlays.items():
            g = base.group_ids.get(group)
            if g is not None and not overlay.is_trivial():
                holders = base.holders_of_group(g)
                present[holders] = _present_mask(base, holders, overlay)
        counts = np.bincount(base.holder_topic, weights=present, minlength=base.topic_count)
        shadow = np.zeros(base.topic_count, bool)
        return RouteTopics(
            base, _EMPTY_DELTA, dict(overlays), present, counts.astype(_count_type(base)), shadow
        )

    # -- the next snapshot --

    def changed(
        self,
        base_entries: Mapping[str, Entry | None],
        overlays: Mapping[str, Overlay | None],
        base_ids: npt.NDArray[np.int64] | None = None,
    ) -> RouteTopics:
        """With these topics' base entries replaced (None: no holder left) and these groups'
        overlays (None: the row is gone, trivial); the rest shared with this one.
        `base_ids`: the topics' ids in the base index (-1: none) in base_entries' order, if
        known (else searched)."""
        base = self.base
        present, counts, shadow = self.present, self.counts, self.shadow
        new_overlays = self.overlays
        if overlays:
            new_overlays = dict(self.overlays)
            copied = False
            for group, overlay in overlays.items():
                old = new_overlays.pop(group, TRIVIAL)
                if overlay is not None:
                    new_overlays[group] = overlay
                g = base.group_ids.get(group)
                if g is None or (overlay or TRIVIAL) == old:
                    continue
                holders = base.holders_of_group(g)
                mask = _present_mask(base, holders, overlay or TRIVIAL)
                diff = mask.astype(np.int32) - present[holders]
                if not diff.any():
                    continue
                if not copied:  # copy on write: the served snapshot keeps its arrays
                    present, counts, copied = present.copy(), counts.copy(), True
                present[holders] = mask
                counts[base.holder_topic[holders]] += diff  # one holder per (topic, group)
        delta = self.delta
        if base_entries:
            names = list(base_entries)
            ids = base.find_many(names) if base_ids is None else base_ids
            # a base topic left is GONE in the delta (it shadows the base's entry)
            delta = delta.replaced(
                {
                    topic: (entry or GONE) if i >= 0 else (entry or None)
                    for (topic, entry), i in zip(base_entries.items(), ids.tolist(), strict=True)
                }
            )
            in_base = ids[ids >= 0]
            shadowed = in_base[~shadow[in_base]]
            if len(shadowed):
                shadow = shadow.copy()
                shadow[shadowed] = True
        key = self.arrays_key if present is self.present else None
        return RouteTopics(base, delta, new_overlays, present, counts, shadow, key)

    @property
    def delta_topics(self) -> int:
        """Topics the delta holds instead of the base (what a new base index would save)."""
        return len(self.delta)

    # -- per topic --

    def raw(self, topic: str) -> Entry | None:
        """The topic's base holders, whatever the overlays."""
        entry = self.delta.get(topic)
        if entry is not None:
            return entry or None
        i = self.base.find(topic)
        return None if i < 0 else self.base.entry(i)

    def get(self, topic: str) -> Entry | None:
        """The topic's queue datas in topicQueueTable: (group, queue, ...) by group name, or
        None when no holder is present (TOPIC_NOT_EXIST)."""
        entry = self.delta.get(topic)
        if entry is None:
            i = self.base.find(topic)
            if i < 0 or not self.counts[i]:
                return None
            entry = self.base.entry(i)
        elif not entry:
            return None
        return self._effective(topic, entry) if self.special else entry

    def _effective(self, topic: str, entry: Entry) -> Entry | None:
        special = self.special
        names = entry[0::2]
        if not any(name in special for name in names):
            return entry
        flat: list[str | Queue] = []
        for name, queue in zip(names, entry[1::2], strict=True):
            overlay = special.get(name)
            if overlay is not None:
                if not overlay.present or (
                    overlay.covered is not None and topic not in overlay.covered
                ):
                    continue
                if overlay.perm_op is not PermOp.ID:
                    read, write, perm, flag = queue
                    queue = queue_of(read, write, overlay.perm_op.apply(perm), flag)
            flat += (name, queue)
        return tuple(flat) or None

    def holders(
        self,
        topics: Sequence[str],
        present: bool = False,
        catalog: Catalog | None = None,
        ids: npt.NDArray[np.int64] | None = None,
    ) -> Holders:
        """The base holders (`raw`) of these topics, or with `present` only those their
        group's overlay keeps (`get`'s groups; the queue datas as stored, no perm_op): the
        base's by its arrays, the delta's topics by their entries. `catalog`: the name and
        queue indexes to use (extended here; none: this base's); `ids`: the topics' ids in
        this base, if known (else searched for the topics the delta does not hold: after a
        base change of K topics they all are, and the next snapshot needs no search)."""
        base = self.base
        catalog = catalog or Catalog(base)
        entries = self.delta.get_many(topics) if len(self.delta) else []
        in_delta = np.array([e is not None for e in entries], bool) if entries else None
        if ids is None and in_delta is not None:
            ids = np.full(len(topics), -1, np.int64)
            outside = np.flatnonzero(~in_delta)
            ids[outside] = base.find_many([topics[k] for k in outside.tolist()])
        elif ids is None:
            ids = base.find_many(topics)
        answers = ids >= 0 if in_delta is None else (ids >= 0) & ~in_delta
        ks = np.flatnonzero(answers)
        rows = _holders_of_topics(base, ids[ks])
        topic = np.repeat(ks, base.holder_start[ids[ks] + 1] - base.holder_start[ids[ks]])
        if present:
            kept = self.present[rows].astype(bool)
            rows, topic = rows[kept], topic[kept]
        group = base.holder_group[rows].astype(np.int64)
        queue = base.holder_queue[rows].astype(np.int64)
        if (
            catalog.names[: len(base.groups)] != base.groups
            or catalog.queues[: len(base.queues)] != base.queues
        ):  # another base's catalog: map by name and queue
            group = np.array([catalog.name(n) for n in base.groups], np.int64)[group]
            queue = np.array([catalog.queue(q) for q in base.queues], np.int64)[queue]
        if in_delta is not None and in_delta.any():
            more = self._delta_holders(topics, entries, in_delta, present, catalog)
            order = np.argsort(np.concatenate([topic, more[0]]), kind="stable")
            topic = np.concatenate([topic, more[0]])[order]
            group = np.concatenate([group, more[1]])[order]
            queue = np.concatenate([queue, more[2]])[order]
        return Holders(topic.astype(np.int64), group, queue, catalog.names, catalog.queues, ids)

    def _delta_holders(
        self,
        topics: Sequence[str],
        entries: list[Entry | None],
        in_delta: npt.NDArray[np.bool_],
        present: bool,
        catalog: Catalog,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """`holders`' rows of the topics the delta holds: (topic, group, queue) arrays."""
        ks = np.flatnonzero(in_delta)
        picked = [entries[k] or () for k in ks.tolist()]
        names = list(chain.from_iterable(e[0::2] for e in picked))
        queues = list(chain.from_iterable(e[1::2] for e in picked))
        for name in set(names).difference(catalog.name_ids):
            catalog.name(name)
        for queue_data in set(queues).difference(catalog.queue_ids):
            catalog.queue(queue_data)
        topic = np.repeat(ks, [len(e) // 2 for e in picked])
        group = np.fromiter(map(catalog.name_ids.__getitem__, names), np.int64, len(names))
        queue = np.fromiter(map(catalog.queue_ids.__getitem__, queues), np.int64, len(queues))
        special = self.special if present else {}
        if special:  # what the groups' overlays leave out (`_effective`)
            kept = np.ones(len(names), bool)
            for name, overlay in special.items():
                g = catalog.name_ids.get(name)
                if g is None:
                    continue
                ours = np.flatnonzero(group == g)
                if not overlay.present:
                    kept[ours] = False
                elif overlay.covered is not None:
                    covered = overlay.covered
                    kept[ours] = [topics[k] in covered for k in topic[ours].tolist()]
            topic, group, queue = topic[kept], group[kept], queue[kept]
        return topic, group, queue

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and self.get(topic) is not None

    def entry_of(self, topic: str, i: int) -> Entry | None:
        """`get(topic)` for base topic `i` (its id, known: no search), not in the delta."""
        if not self.counts[i]:
            return None
        entry = self.base.entry(i)
        return self._effective(topic, entry) if self.special else entry

    def has_each(self, topics: list[str], ids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Per topic: in topicQueueTable (`ids`: their base topic ids, -1 for none): the
        per-topic counts decide for the base's, the delta for its own."""
        found = np.zeros(len(topics), bool)
        in_base = ids >= 0
        known = ids[in_base]
        found[in_base] = (self.counts[known] > 0) & ~self.shadow[known]
        if len(self.delta):  # the topics the delta holds: shadowed ones, new ones
            maybe = ~in_base
            maybe[in_base] = self.shadow[known]
            for k in np.flatnonzero(maybe).tolist():
                found[k] = topics[k] in self
        return found

    shard_of = staticmethod(TopicStore.shard_of)

    # -- all topics --

    def visible(self) -> npt.NDArray[Any]:
        """Per base topic: in topicQueueTable through the base (a present holder, not
        replaced by the delta)."""
        if self._visible is None:
            self._visible = (self.counts > 0) & ~self.shadow
        return self._visible

    def delta_items(self, shard: Mapping[str, Entry] | None = None) -> Iterator[tuple[str, Entry]]:
        """The delta's topics in topicQueueTable, with their entries as served (`shard`:
        those of one of its shards)."""
        for topic, entry in self.delta.items() if shard is None else shard.items():
            if entry:
                effective = self._effective(topic, entry) if self.special else entry
                if effective is not None:
                    yield topic, effective

    def __len__(self) -> int:
        if self._len is None:
            self._len = int(np.count_nonzero(self.visible())) + sum(1 for _ in self.delta_items())
        return self._len

    def names(self) -> list[str]:
        """Every topic of topicQueueTable, sorted."""
        names = self.base.topic_names(np.flatnonzero(self.visible()))
        extra = [topic for topic, _ in self.delta_items()]
        if extra:
            names = sorted(names + extra)
        return names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> Iterator[tuple[str, Entry]]:
        ids = np.flatnonzero(self.visible())
        names = self.base.topic_names(ids)
        entry, special = self.base.entry, self.special
        for topic, i in zip(names, ids.tolist(), strict=True):
            found = entry(i)
            if special:
                effective = self._effective(topic, found)
                if effective is None:
                    continue
                found = effective
            yield topic, found
        yield from self.delta_items()

    def values(self) -> Iterator[Entry]:
        for _, entry in self.items():
            yield entry

    @property
    def row_count(self) -> int:
        """(topic, broker) rows of topicQueueTable."""
        holders = self.base_holders()
        return int(np.count_nonzero(holders)) + sum(len(e) // 2 for _, e in self.delta_items())

    def base_holders(self) -> npt.NDArray[np.bool_]:
        """Per base holder: present, and its topic not replaced by the delta (computed once
        per snapshot; read-only)."""
        if self._holders is None:
            holders: npt.NDArray[np.bool_] = self.present.astype(bool)
            holders &= ~self.shadow[self.base.holder_topic]
            holders.flags.writeable = False
            self._holders = holders
        return self._holders

    # -- vectorised views (what RouteIndex lists and counts) --

    def holder_perms(self, holders: npt.NDArray[Any] | None = None) -> npt.NDArray[np.int64]:
        """Per base holder (or per one of `holders`): its perm as served (its group's
        perm_op applied)."""
        base = self.base
        perms = np.array([q[2] for q in base.queues], np.int64)
        queues = base.holder_queue if holders is None else base.holder_queue[holders]
        perm: npt.NDArray[np.int64] = perms[queues]
        for group, overlay in self.special.items():
            g = base.group_ids.get(group)
            if g is None or overlay.perm_op is PermOp.ID:
                continue
            if holders is None:
                ours: Any = base.holders_of_group(g)
            else:
                ours = base.holder_group[holders] == g
            if overlay.perm_op is PermOp.WIPE:
                perm[ours] &= ~PERM_WRITE
            else:
                perm[ours] = overlay.perm_op.apply(0)  # RW and R set the perm
        return perm

    def group_topic_counts(self, groups: Iterable[str] | None = None) -> dict[str, int]:
        """Per group name: the topics it has queue datas of (only the groups with some);
        `groups`: these groups' counts only, 0s included (each counted over its own holders,
        not over all of them)."""
        base = self.base
        if groups is None:
            counts = np.bincount(
                base.holder_group[self.base_holders()], minlength=len(base.groups)
            ).tolist()
            out = {name: n for name, n in zip(base.groups, counts, strict=True) if n}
        else:
            out = {}
            for name in groups:
                g = base.group_ids.get(name)
                holders = base.holders_of_group(g) if g is not None else base.holder_group[:0]
                kept = self.present[holders].astype(bool) & ~self.shadow[base.holder_topic[holders]]
                out[name] = int(np.count_nonzero(kept))
            if not out:
                return out
        for _, entry in self.delta_items():
            for name in entry[0::2]:
                if groups is None or name in out:
                    out[name] = out.get(name, 0) + 1
        return out

    def base_write_counts(
        self, last: RouteTopics | None = None, counted: GroupCounts | None = None
    ) -> GroupCounts:
        """Per group id: its base holders in topicQueueTable (present, topic not in the
        delta) and of which writable as served. From `last`'s `counted` when only the delta
        grew since (no flip, the same perm overlays): less the holders of the topics that
        moved to the delta, instead of a count over every holder (3 M at 300 x 10 000)."""
        base = self.base
        groups = len(base.groups)
        if (
            last is not None
            and counted is not None
            and last.base is base
            and last.present is self.present
            and last.special == self.special
        ):
            if last.shadow is self.shadow:
                return counted
            moved = _holders_of_topics(base, np.flatnonzero(self.shadow & ~last.shadow))
            moved = moved[self.present[moved].astype(bool)]
            writable = moved[self.holder_perms(moved) & PERM_WRITE != 0]
            return (
                counted[0] - np.bincount(base.holder_group[moved], minlength=groups),
                counted[1] - np.bincount(base.holder_group[writable], minlength=groups),
            )
        holders = self.base_holders()
        writable = holders & (self.holder_perms() & PERM_WRITE != 0)
        return (
            np.bincount(base.holder_group[holders], minlength=groups),
            np.bincount(base.holder_group[writable], minlength=groups),
        )

    def group_write_counts(
        self, counted: GroupCounts | None = None, delta: DeltaWriteCounts | None = None
    ) -> dict[str, tuple[int, int]]:
        """Per group name: (topics it has queue datas of, of which writable as served);
        `counted`: this store's base_write_counts, `delta`: its DeltaWriteCounts, if known."""
        base = self.base
        n, w = counted if counted is not None else self.base_write_counts()
        counts = {
            g: [a, b] for g, a, b in zip(base.groups, n.tolist(), w.tolist(), strict=True) if a
        }
        for name, (a, b) in (delta or DeltaWriteCounts(self)).totals.items():
            slot = counts.setdefault(name, [0, 0])
            slot[0] += a
            slot[1] += b
        return {g: (a, b) for g, (a, b) in counts.items() if a}

    def delta_write_counts(self, shard: Mapping[str, Entry]) -> dict[str, tuple[int, int]]:
        """Per group name: the topics of one shard of the delta it has queue datas of, and
        of which writable as served."""
        counts: dict[str, list[int]] = {}
        for _, entry in self.delta_items(shard):
            for name, queue in zip(entry[0::2], entry[1::2], strict=True):
                slot = counts.setdefault(name, [0, 0])
                slot[0] += 1
                slot[1] += bool(queue[2] & PERM_WRITE)
        return {g: (a, b) for g, (a, b) in counts.items()}

    def _topics_of(self, groups: Iterable[str]) -> tuple[npt.NDArray[Any], list[str]]:
        """Base topic ids (a mask) and delta topics with a present holder in `groups`."""
        base, wanted = self.base, frozenset(groups)
        mask = np.zeros(len(base.groups), bool)
        mask[[g for name, g in base.group_ids.items() if name in wanted]] = True
        holders = self.base_holders() & mask[base.holder_group]
        topics = np.zeros(base.topic_count, bool)
        topics[base.holder_topic[holders]] = True
        extra = [t for t, e in self.delta_items() if not wanted.isdisjoint(e[0::2])]
        return topics, extra

    def count_with_group_in(self, groups: Iterable[str]) -> int:
        wanted = frozenset(groups)
        if all(name in wanted for name in self._holding_groups()):
            # every present holder's group is wanted (the usual case: the groups in
            # brokerAddrTable): the topics with a present holder, counted already
            extra = sum(1 for _, e in self.delta_items() if not wanted.isdisjoint(e[0::2]))
            return int(np.count_nonzero(self.visible())) + extra
        topics, extra_topics = self._topics_of(wanted)
        return int(np.count_nonzero(topics)) + len(extra_topics)

    def _holding_groups(self) -> list[str]:
        """The base's groups that may have a present holder (their overlay keeps some)."""
        return [g for g in self.base.groups if self.overlays.get(g, TRIVIAL).present]

    def names_with_group_in(self, groups: Iterable[str]) -> list[str]:
        topics, extra = self._topics_of(groups)
        names = self.base.topic_names(np.flatnonzero(topics))
        return sorted(names + extra) if extra else names

    def system_topic_names(self) -> list[str]:
        """Topics of topicQueueTable that RocketMQ's TopicValidator calls system topics."""
        ids = self.base.system_topic_ids()
        names = self.base.topic_names(ids[self.visible()[ids]])
        extra = [
            t
            for t, _ in self.delta_items()
            if t in SYSTEM_TOPIC_SET or t.startswith(SYSTEM_TOPIC_PREFIX)
        ]
        return sorted(names + extra)
