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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from routing_lib.core.group_routes import MASTER_ID, PERM_WRITE
from routing_lib.lookup.routes import RouteIndex

NO_CLUSTER = "none"  # a broker group no longer in brokerAddrTable


@dataclass(frozen=True)
class RouteRisk:
    live_brokers: Mapping[str, int]  # cluster -> brokers in brokerLiveTable
    without_writable: Mapping[str, tuple[str, ...]]  # cluster -> topics, sorted
    single_group: Mapping[str, tuple[str, ...]]  # cluster -> topics, sorted
    clusters: tuple[str, ...]  # every cluster of clusterAddrTable

    def topics_without_writable(self) -> list[str]:
        return sorted({t for topics in self.without_writable.values() for t in topics})

    def single_group_topics(self) -> list[str]:
        return sorted({t for topics in self.single_group.values() for t in topics})


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
        # topics of the last index: topic -> (its broker groups, their clusters)
        self._present: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        # topics gone with their groups: topic -> (groups, clusters, when noticed)
        self._lost: dict[str, tuple[tuple[str, ...], tuple[str, ...], float]] = {}

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
        system = set(index.system_topics)
        unwritable: dict[str, list[str]] = {}
        single: dict[str, list[str]] = {}
        present: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for topic, entry in index.store.items():
            if topic in system:
                continue
            groups: tuple[str, ...] = entry[0::2]
            clusters = tuple(sorted({cluster_of.get(g, NO_CLUSTER) for g in groups}))
            present[topic] = (groups, clusters)
            writable = any(
                queue[2] & PERM_WRITE and queue[1] > 0 and group in masters
                for group, queue in zip(groups, entry[1::2], strict=True)
            )
            for cluster in clusters:
                if not writable:
                    unwritable.setdefault(cluster, []).append(topic)
                if len(groups) == 1:
                    single.setdefault(cluster, []).append(topic)
        for topic, (groups, clusters) in self._present.items():
            if topic not in present and not masters.intersection(groups):
                self._lost[topic] = (groups, clusters, now)
        for topic, (groups, clusters, since) in list(self._lost.items()):
            if (
                topic in present
                or masters.intersection(groups)
                or now - since > self.forget_after_s
            ):
                del self._lost[topic]
                continue
            for cluster in clusters:
                unwritable.setdefault(cluster, []).append(topic)
        self._present = present
        live: dict[str, int] = {}
        for row in index.live_brokers:
            live[row["clusterName"]] = live.get(row["clusterName"], 0) + 1
        clusters_known = tuple(sorted(index.cluster_topics))
        return RouteRisk(
            {c: live.get(c, 0) for c in sorted(set(live) | set(clusters_known))},
            {c: tuple(sorted(ts)) for c, ts in sorted(unwritable.items())},
            {c: tuple(sorted(ts)) for c, ts in sorted(single.items())},
            clusters_known,
        )

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
            unwritable.add_metric([cluster], len(risk.without_writable.get(cluster, ())))
            single.add_metric([cluster], len(risk.single_group.get(cluster, ())))
        return [live, unwritable, single]
