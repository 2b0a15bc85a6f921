"""Route risks of the served tables, per cluster: what a NameServer shows nobody.

- **Topics without a writable queue**: producers fail with "No route info of this topic".
  A RocketMQ producer writes to a queue of a topic only if the queue's perm has W, its
  writeQueueNums > 0 and its broker group has a master (brokerId 0). A topic is counted when
  it is in topicQueueTable without such a queue, and also when it *left* topicQueueTable
  because every broker group holding it went away (expired or lost its master): RocketMQ
  drops a topic with its last queue, so the table alone forgets exactly the topics that just
  lost their routes. Such a topic is remembered until it is routable again, until one of its
  groups comes back with a master without it (then it was removed on purpose), or for
  `forget_after_s`. A topic deleted by an operator, or dropped by a group that is still there,
  is not a loss.
- **Single-group topics**: every queue on one broker group: a single point of failure.
- **Live brokers** per cluster (brokerLiveTable).

System topics (TBW102, the per-broker and per-cluster topics, ...) are left out: they live on
one group by design.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from routing_lib.core.group_routes import MASTER_ID, PERM_WRITE
from routing_lib.lookup.base_index import BaseIndex
from routing_lib.lookup.route_topics import RouteTopics
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.topic_store import Entry, Queue

NO_CLUSTER = "none"  # a broker group no longer in brokerAddrTable


class TopicIds:
    """A set of base topic ids as a bitmap (one bit per base topic: 375 KB at 3 M topics,
    where an id array of a cluster whose every topic is on one group took 24 MB) and its
    size; the ids are unpacked only when the names are read."""

    __slots__ = ("_bits", "_topics", "size")

    def __init__(self, mask: npt.NDArray[np.bool_]) -> None:
        self._bits = np.packbits(mask)
        self._topics = len(mask)
        self.size = int(np.count_nonzero(mask))

    def __len__(self) -> int:
        return self.size

    def ids(self) -> npt.NDArray[Any]:
        return np.flatnonzero(np.unpackbits(self._bits, count=self._topics))

    def without(self, ids: npt.NDArray[Any]) -> TopicIds:
        """These ids taken out (a copy of the bitmap with their bits cleared)."""
        if not len(ids):
            return self
        out = object.__new__(TopicIds)
        out._topics = self._topics
        out._bits = self._bits.copy()
        byte, bit = ids >> 3, (7 - (ids & 7)).astype(np.uint8)  # packbits: big-endian bits
        was = (self._bits[byte] >> bit) & 1
        np.bitwise_and.at(out._bits, byte, ~(np.uint8(1) << bit))
        out.size = self.size - int(np.count_nonzero(was))
        return out


class TopicLists(Mapping[str, tuple[str, ...]]):
    """cluster -> its topics, sorted; counted when built, named only when read (at 3 M
    topics a list of names per index would cost seconds and hundreds of MB: the gauges
    need the counts only, the console reads the names)."""

    def __init__(
        self,
        base: BaseIndex | None,
        ids: Mapping[str, TopicIds],
        extra: Mapping[str, list[str]],
    ) -> None:
        self._base = base
        self._ids = ids  # cluster -> base topic ids
        self._extra = extra  # cluster -> names besides (the delta's topics, lost topics)
        self.sizes = {
            c: n
            for c in sorted(set(ids) | set(extra))
            if (n := len(ids.get(c, ())) + len(extra.get(c, ())))
        }
        self._named: dict[str, tuple[str, ...]] = {}

    def __getitem__(self, cluster: str) -> tuple[str, ...]:
        if cluster not in self.sizes:
            raise KeyError(cluster)
        named = self._named.get(cluster)
        if named is None:
            ids = self._ids.get(cluster)
            names = (
                self._base.topic_names(ids.ids())
                if self._base is not None and ids is not None
                else []
            )
            named = self._named[cluster] = tuple(sorted({*names, *self._extra.get(cluster, ())}))
        return named

    def __iter__(self) -> Iterator[str]:
        return iter(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True)
class RouteRisk:
    live_brokers: Mapping[str, int]  # cluster -> brokers in brokerLiveTable
    without_writable: TopicLists  # cluster -> topics, sorted
    single_group: TopicLists  # cluster -> topics, sorted
    clusters: tuple[str, ...]  # every cluster of clusterAddrTable

    def topics_without_writable(self) -> list[str]:
        return sorted({t for topics in self.without_writable.values() for t in topics})

    def single_group_topics(self) -> list[str]:
        return sorted({t for topics in self.single_group.values() for t in topics})


Groups = tuple[tuple[str, ...], tuple[str, ...]]  # a topic's broker groups and their clusters
Vanished = tuple[tuple[str, ...], tuple[str, ...], int]  # ... and its id in the base (or -1)


class RouteRisks:
    """RouteRisk of each new index, carrying what vanished topics were on (one per index:
    cached by identity, thread-safe)."""

    def __init__(
        self, forget_after_s: float = 3600.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.forget_after_s = forget_after_s
        self.clock = clock
        self._lock = threading.Lock()
        self._index: RouteIndex | None = None
        self._risk: RouteRisk | None = None
        # topics gone with their groups: topic -> (groups, clusters, when noticed)
        self._lost: dict[str, tuple[tuple[str, ...], tuple[str, ...], float]] = {}
        # their ids in this base index (-1: not in it), to look them up in one vectorised
        # step instead of a binary search each (a 10 000-topic group away is 10 000 topics)
        self._lost_ids: dict[str, int] = {}
        self._lost_base: BaseIndex | None = None
        # what the base part of the last risk was computed from, and that part
        self._base_part: _BasePart | None = None
        self._delta_part: _DeltaPart | None = None  # the same for the delta's topics

    def of(self, index: RouteIndex) -> RouteRisk:
        with self._lock:
            if index is not self._index or self._risk is None:
                self._risk = self._update(index)
                self._index = index
            return self._risk

    def _update(self, index: RouteIndex) -> RouteRisk:
        now = self.clock()
        brokers = index.cluster_info["brokerAddrTable"]
        cluster_of = {name: b["cluster"] for name, b in brokers.items()}
        masters = {
            name
            for name, b in brokers.items()
            if MASTER_ID in b["brokerAddrs"] or str(MASTER_ID) in b["brokerAddrs"]
        }
        context = _RiskContext(cluster_of, masters, frozenset(index.system_topics))
        delta_part = _DeltaPart(index.store, context)
        unwritable, single = delta_part.risks(self._delta_part)
        self._delta_part = delta_part
        part = _BasePart(index.store, context)
        base_unwritable, base_single = part.risks(self._base_part)
        self._base_part = part
        if self._index is not None:
            self._lost_in(self._index.store.base)
            for topic, (groups, clusters, i) in _vanished(self._index, index).items():
                if not masters.intersection(groups):
                    self._lost[topic] = (groups, clusters, now)
                    self._lost_ids[topic] = i
        # per (groups, clusters, since): an away group's topics share one, decided once
        routed = self._still_routed(index.store)
        alike: dict[tuple[tuple[str, ...], tuple[str, ...], float], list[str]] = {}
        for topic, lost in self._lost.items():
            alike.setdefault(lost, []).append(topic)
        drop = list(routed)
        for (groups, clusters, since), topics in alike.items():
            if masters.intersection(groups) or now - since > self.forget_after_s:
                drop += topics
                continue
            kept = [t for t in topics if t not in routed] if routed else topics
            for cluster in clusters:
                unwritable.setdefault(cluster, []).extend(kept)
        for topic in drop:
            self._lost.pop(topic, None)
            self._lost_ids.pop(topic, None)
        live: dict[str, int] = {}
        for row in index.live_brokers:
            live[row["clusterName"]] = live.get(row["clusterName"], 0) + 1
        clusters_known = tuple(sorted(index.cluster_topics))
        base = index.store.base
        return RouteRisk(
            {c: live.get(c, 0) for c in sorted(set(live) | set(clusters_known))},
            TopicLists(base, base_unwritable, unwritable),
            TopicLists(base, base_single, single),
            clusters_known,
        )

    def _lost_in(self, base: BaseIndex) -> None:
        """The lost topics' ids as those of `base` (searched when it is another base)."""
        if self._lost_base is not base:
            self._lost_ids = {t: base.find(t) for t in self._lost}
            self._lost_base = base

    def _still_routed(self, topics: RouteTopics) -> set[str]:
        """The lost topics `topics` has again (in topicQueueTable)."""
        if not self._lost:
            return set()
        self._lost_in(topics.base)
        names = list(self._lost)
        ids = np.array([self._lost_ids.get(t, -1) for t in names], np.int64)
        found = topics.has_each(names, ids)
        return {names[k] for k in np.flatnonzero(found).tolist()}

    def families(self, index: RouteIndex | None) -> Iterable[Metric]:
        """The route gauges of `index` (none before a snapshot is served)."""
        if index is None:
            return []
        risk = self.of(index)
        live = GaugeMetricFamily(
            "routelake_routes_live_brokers",
            "Brokers in brokerLiveTable of the served snapshot, per cluster.",
            labels=["cluster"],
        )
        unwritable = GaugeMetricFamily(
            "routelake_routes_topics_without_writable_queue",
            "Topics no producer can write to (no queue with write permission on a broker "
            "group with a master, or gone with every group that held them), per cluster.",
            labels=["cluster"],
        )
        single = GaugeMetricFamily(
            "routelake_routes_topics_single_broker_group",
            "Topics whose every queue lives on one broker group (a single point of "
            "failure), per cluster.",
            labels=["cluster"],
        )
        clusters = sorted(set(risk.clusters) | set(risk.without_writable) | set(risk.single_group))
        for cluster in sorted(set(clusters) | set(risk.live_brokers)):
            live.add_metric([cluster], risk.live_brokers.get(cluster, 0))
        for cluster in clusters:  # 0 too: an alert's expression has a series to compare
            unwritable.add_metric([cluster], risk.without_writable.sizes.get(cluster, 0))
            single.add_metric([cluster], risk.single_group.sizes.get(cluster, 0))
        return [live, unwritable, single]


# -- the per-topic part, vectorised over the base index's holders --


def _writable(queue: Queue, group: str, masters: frozenset[str] | set[str]) -> bool:
    """A producer can write to this queue data: W perm, write queues, a master."""
    return bool(queue[2] & PERM_WRITE) and queue[1] > 0 and group in masters


def _groups_of(entry: Entry, cluster_of: Mapping[str, str]) -> Groups:
    groups: tuple[str, ...] = entry[0::2]
    return groups, tuple(sorted({cluster_of.get(g, NO_CLUSTER) for g in groups}))


TopicsByCluster = tuple[dict[str, list[str]], dict[str, list[str]]]


class _RiskContext(NamedTuple):
    """What a topic's risk depends on besides its holders: a store's counts carry over to the
    next store only while it is the same."""

    cluster_of: Mapping[str, str]
    masters: set[str]
    system: frozenset[str]


class _DeltaPart:
    """The delta's topics' risks of one store, per shard of the delta: a shard the store
    shares with the last one (the same dict: copy on write) keeps its risks while the
    brokers, system topics and overlays are the same, so after a base change of 10 000
    topics each snapshot counts only the shards its own changes touched."""

    def __init__(self, topics: RouteTopics, context: _RiskContext) -> None:
        self.topics = topics
        self.context = context
        self.shards = topics.delta.shards()
        self.found: list[TopicsByCluster] = []

    def risks(self, last: _DeltaPart | None) -> TopicsByCluster:
        carries = (
            last is not None
            and last.topics.special == self.topics.special
            and last.context == self.context
        )
        unwritable: dict[str, list[str]] = {}
        single: dict[str, list[str]] = {}
        for i, shard in enumerate(self.shards):
            if last is not None and carries and last.shards[i] is shard:
                found = last.found[i]
            else:
                found = _delta_risks(self.topics, shard, *self.context)
            self.found.append(found)
            for cluster, topics in found[0].items():
                unwritable.setdefault(cluster, []).extend(topics)
            for cluster, topics in found[1].items():
                single.setdefault(cluster, []).extend(topics)
        return unwritable, single


def _delta_risks(
    topics: RouteTopics,
    shard: Mapping[str, Entry],
    cluster_of: Mapping[str, str],
    masters: set[str],
    system: frozenset[str],
) -> TopicsByCluster:
    """Per cluster: the topics of one shard of the delta without a writable queue and those
    on one group."""
    unwritable: dict[str, list[str]] = {}
    single: dict[str, list[str]] = {}
    for topic, entry in topics.delta_items(shard):
        if topic in system:
            continue
        groups, clusters = _groups_of(entry, cluster_of)
        writable = any(_writable(q, g, masters) for g, q in zip(groups, entry[1::2], strict=True))
        for cluster in clusters:
            if not writable:
                unwritable.setdefault(cluster, []).append(topic)
            if len(groups) == 1:
                single.setdefault(cluster, []).append(topic)
    return unwritable, single


class _BasePart:
    """The base topics' risks of one store (per cluster: those without a writable queue,
    those on one group), computed over the base's holders, or carried from the last store's
    when only the delta grew: a batch that changes a few topics moves them from the base to
    the delta, so the base part loses them and nothing else changes (a flip, a broker or
    system topic change: counted again)."""

    def __init__(self, topics: RouteTopics, context: _RiskContext) -> None:
        self.topics = topics
        self.context = context
        self.found: tuple[dict[str, TopicIds], dict[str, TopicIds]] | None = None

    def _carries(self, last: _BasePart) -> bool:
        old, new = last.topics, self.topics
        return (
            last.found is not None
            and old.base is new.base
            and old.present is new.present  # no flip (a flip copies the arrays)
            and old.special == new.special  # the same perm ops
            and last.context == self.context
        )

    def risks(self, last: _BasePart | None) -> tuple[dict[str, TopicIds], dict[str, TopicIds]]:
        if last is not None and last.found is not None and self._carries(last):
            old, new = last.topics.shadow, self.topics.shadow
            moved = np.flatnonzero(new & ~old) if new is not old else np.zeros(0, np.int64)
            unwritable, single = last.found
            self.found = (
                {c: ids.without(moved) for c, ids in unwritable.items()},
                {c: ids.without(moved) for c, ids in single.items()},
            )
            for found in self.found:
                for cluster in [c for c, ids in found.items() if not ids.size]:
                    del found[cluster]
        else:
            self.found = _base_risks(self.topics, *self.context)
        return self.found


def _base_risks(
    topics: RouteTopics,
    cluster_of: Mapping[str, str],
    masters: set[str],
    system: frozenset[str],
) -> tuple[dict[str, TopicIds], dict[str, TopicIds]]:
    """Per cluster: the base topics (not in the delta) without a writable queue and those
    on one group, as base topic ids (numpy, over the base's holders)."""
    base = topics.base
    names = base.groups
    known = sorted({cluster_of.get(g, NO_CLUSTER) for g in names})
    cluster_id = np.array([known.index(cluster_of.get(g, NO_CLUSTER)) for g in names], np.int32)
    is_master = np.array([g in masters for g in names], bool)
    holders = topics.base_holders()  # present, topic not in the delta
    if system:
        is_system = np.zeros(base.topic_count, bool)
        is_system[base.topic_ids(sorted(system))] = True
        holders = holders & ~is_system[base.holder_topic]
    perm = topics.holder_perms()
    write = np.array([q[1] for q in base.queues], np.int64)[base.holder_queue]
    can_write = holders & (perm & PERM_WRITE != 0) & (write > 0) & is_master[base.holder_group]
    has_writable = np.zeros(base.topic_count, bool)
    has_writable[base.holder_topic[can_write]] = True
    one_group = topics.counts == 1
    by_unwritable: dict[str, TopicIds] = {}
    by_single: dict[str, TopicIds] = {}
    holder_cluster = cluster_id[base.holder_group]
    for c, cluster in enumerate(known):
        in_cluster = np.zeros(base.topic_count, bool)
        in_cluster[base.holder_topic[holders & (holder_cluster == c)]] = True
        if (found := TopicIds(in_cluster & ~has_writable)).size:
            by_unwritable[cluster] = found
        if (found := TopicIds(in_cluster & one_group)).size:
            by_single[cluster] = found
    return by_unwritable, by_single


def _vanished(before: RouteIndex, after: RouteIndex) -> dict[str, Vanished]:
    """The topics of `before` (not its system topics) that `after` no longer has, with the
    groups and clusters they were on, and their id in `before`'s base index (-1: none)."""
    old, new = before.store, after.store
    if old is new:
        return {}
    system = frozenset(before.system_topics)
    cluster_of = {name: b["cluster"] for name, b in before.cluster_info["brokerAddrTable"].items()}
    out: dict[str, Vanished] = {}
    candidates: list[str]
    if old.base is new.base:  # the usual case: the candidates from two masks and the deltas
        # base topics visible before and not now (unless the delta has them now): by id,
        # without a search per topic (an expired group's 10 000 topics)
        ids = np.flatnonzero(old.visible() & ~new.visible() & ~new.shadow)
        for topic, i in zip(old.base.topic_names(ids), ids.tolist(), strict=True):
            entry = old.entry_of(topic, i)
            if entry is not None and topic not in system:
                out[topic] = (*_groups_of(entry, cluster_of), i)
        if old.special == new.special:  # the same overlays: only a changed shard's topics
            pairs = zip(old.delta.shards(), new.delta.shards(), strict=True)
            candidates = [t for a, b in pairs if a is not b for t in (*a, *b)]
        else:
            candidates = [*old.delta, *new.delta]
    else:  # another base index: compare the names
        candidates = sorted(set(old.names()) - set(new.names()))
    for topic in candidates:
        entry = old.get(topic)
        if entry is not None and topic not in system and topic not in new and topic not in out:
            out[topic] = (*_groups_of(entry, cluster_of), old.base.find(topic))
    return out
