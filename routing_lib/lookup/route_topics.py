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

from collections.abc import Iterable, Iterator, Mapping
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
    ) -> RouteTopics:
        """With these topics' base entries replaced (None: no holder left) and these groups'
        overlays (None: the row is gone, trivial); the rest shared with this one."""
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
            replaced: dict[str, Entry | None] = {}
            shadowed: list[int] = []
            for topic, entry in base_entries.items():
                i = base.find(topic)
                if i >= 0:
                    replaced[topic] = entry or GONE
                    if not shadow[i]:
                        shadowed.append(i)
                else:
                    replaced[topic] = entry or None
            delta = delta.replaced(replaced)
            if shadowed:
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

    def delta_items(self) -> Iterator[tuple[str, Entry]]:
        """The delta's topics in topicQueueTable, with their entries as served."""
        for topic, entry in self.delta.items():
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

    def group_write_counts(self, counted: GroupCounts | None = None) -> dict[str, tuple[int, int]]:
        """Per group name: (topics it has queue datas of, of which writable as served);
        `counted`: this store's base_write_counts, if known."""
        base = self.base
        n, w = counted if counted is not None else self.base_write_counts()
        counts = {
            g: [a, b] for g, a, b in zip(base.groups, n.tolist(), w.tolist(), strict=True) if a
        }
        for _, entry in self.delta_items():
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
