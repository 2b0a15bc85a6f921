"""Route risks of the served tables (routing_lib/lookup/route_risk.py): topics no producer can
write to, topics on one broker group, live brokers per cluster; and the lookup's gauges of them."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from routing_lib.core.catalog import BROKER_ADDR, CLUSTER_ADDR, TOPIC_QUEUE
from routing_lib.lookup.route_risk import NO_CLUSTER, RouteRisks
from routing_lib.lookup.routes import RouteIndex
from routing_lib.read.warehouse import WarehouseSnapshot
from tests.support.lookup_support import (
    VERSIONS,
    ServerThread,
    Warehouse,
    addr,
    queue,
    snapshot,
    tables,
    wait_until,
)
from tests.support.metrics_support import sample


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def index_of(rows: dict[str, list[dict]]) -> RouteIndex:
    return RouteIndex(WarehouseSnapshot(rows, dict(VERSIONS), 1_764_000_050_000))


def without(rows: dict[str, list[dict]], broker: str) -> dict[str, list[dict]]:
    """The tables after `broker`'s whole group went away (as an expiry of its last broker
    leaves them: its queues, addresses and cluster membership gone)."""
    out = {name: list(table) for name, table in rows.items()}
    out[TOPIC_QUEUE] = [r for r in out[TOPIC_QUEUE] if r["broker_name"] != broker]
    out[BROKER_ADDR] = [r for r in out[BROKER_ADDR] if r["broker_name"] != broker]
    out[CLUSTER_ADDR] = [r for r in out[CLUSTER_ADDR] if r["broker_name"] != broker]
    return out


def test_topics_without_a_writable_queue_and_on_one_group_per_cluster():
    risk = RouteRisks().of(RouteIndex(snapshot()))
    # Acting is read-only; ActingRW is writable by perm but broker-c has no master (id 0);
    # Lonely's only group is not in brokerAddrTable. Orders and Half have a master's queue.
    assert risk.without_writable == {"ClusterB": ("Acting", "ActingRW"), NO_CLUSTER: ("Lonely",)}
    assert risk.single_group == {"ClusterB": ("Acting", "ActingRW"), NO_CLUSTER: ("Lonely",)}
    # system topics (TBW102, rmq_sys_...) are on one group by design: not listed
    assert "TBW102" not in risk.single_group_topics()
    assert risk.live_brokers == {"ClusterA": 2, "ClusterB": 1}


def test_a_topic_gone_with_its_only_group_counts_until_the_group_is_back():
    clock = Clock()
    risks = RouteRisks(forget_after_s=600, clock=clock)
    rows = tables()
    rows[TOPIC_QUEUE] += [queue("OnlyOnB", "broker-b", 4), queue("Dropped", "broker-a", 2)]
    assert "OnlyOnB" not in risks.of(index_of(rows)).topics_without_writable()

    # broker-b's group expires: RocketMQ drops OnlyOnB with its last queue. Dropped leaves
    # topicQueueTable too, but broker-a is still there: removed on purpose, not a loss.
    gone = without(rows, "broker-b")
    gone[TOPIC_QUEUE] = [r for r in gone[TOPIC_QUEUE] if r["topic"] != "Dropped"]
    risk = risks.of(index_of(gone))
    assert risk.without_writable["ClusterA"] == ("OnlyOnB",)
    assert "Dropped" not in risk.topics_without_writable()
    clock.now += 60
    assert risks.of(index_of(gone)).without_writable["ClusterA"] == ("OnlyOnB",)  # remembered

    # broker-b registers again, without the topic: it was removed from the broker, not lost
    back = dict(gone)
    back[BROKER_ADDR] = [*gone[BROKER_ADDR], addr("broker-b", 0, "10.0.1.1:10911", "ClusterA")]
    assert "OnlyOnB" not in risks.of(index_of(back)).topics_without_writable()


def test_a_lost_topic_is_forgotten_after_a_while():
    clock = Clock()
    risks = RouteRisks(forget_after_s=600, clock=clock)
    rows = tables()
    rows[TOPIC_QUEUE].append(queue("OnlyOnB", "broker-b", 4))
    risks.of(index_of(rows))
    gone = without(rows, "broker-b")
    assert "OnlyOnB" in risks.of(index_of(gone)).topics_without_writable()
    clock.now += 601
    assert "OnlyOnB" not in risks.of(index_of(gone)).topics_without_writable()


def test_the_lookup_gauges_per_cluster():
    risks = RouteRisks()
    registry = CollectorRegistry()
    index = RouteIndex(snapshot())

    class Families(Collector):
        def collect(self):
            return risks.families(index)

    registry.register(Families())
    value = registry.get_sample_value
    assert value("routelake_routes_live_brokers", {"cluster": "ClusterA"}) == 2
    unwritable = "routelake_routes_topics_without_writable_queue"
    assert value(unwritable, {"cluster": "ClusterB"}) == 2
    assert value(unwritable, {"cluster": "ClusterA"}) == 0  # a series, so alerts can compare
    assert value("routelake_routes_topics_single_broker_group", {"cluster": NO_CLUSTER}) == 1
    assert list(risks.families(None)) == []


def test_the_console_health_view_lists_what_the_gauges_count(tmp_path):
    Warehouse(tmp_path).publish(0, 1_000, tables())
    with ServerThread(tmp_path) as server:
        http = httpx.Client(base_url=f"http://127.0.0.1:{server.service.http_port}")
        wait_until(lambda: server.service.holder.current is not None)
        health = http.get("/console/api/health").json()
        metrics = http.get("/metrics").text
    risks = health["routeRisks"]
    assert risks["withoutWritableQueue"]["clusters"] == {
        "ClusterB": ["Acting", "ActingRW"],
        NO_CLUSTER: ["Lonely"],
    }
    assert risks["withoutWritableQueue"]["total"] == 3
    assert risks["singleBrokerGroup"]["counts"] == {"ClusterB": 2, NO_CLUSTER: 1}
    assert risks["liveBrokers"] == {"ClusterA": 2, "ClusterB": 1}
    for cluster, topics in risks["withoutWritableQueue"]["clusters"].items():
        gauge = sample(metrics, "routelake_routes_topics_without_writable_queue", cluster=cluster)
        assert gauge == len(topics)
