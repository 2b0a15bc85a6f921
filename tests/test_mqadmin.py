"""The lookup service as a real RocketMQ 5.x Java client sees it: mqadmin (rocketmq-tools from
.jars/rocketmq, see scripts/fetch_rocketmq.sh) against the real server over a warehouse built
without Spark from a golden fixture.

The fixture's brokers sit on 10.x addresses; they are moved to 127.x (same octets) before the
tables are written, because `clusterList` asks every listed broker for runtime stats: those
connections must stay on loopback (nothing listens there, so they are refused at once).
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from routelake_dev import mqadmin
from routing_lib.lookup.routes import RouteIndex
from tests.support.lookup_support import ServerThread, Warehouse, fixture_tables, wait_until


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(index, namesrv address) of the real lookup server over the fixture's warehouse."""
    reason = mqadmin.missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"RocketMQ tools missing in CI: {reason}")
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("warehouse")
    tables, until = fixture_tables()
    Warehouse(root).publish(0, until, tables)
    with ServerThread(root) as server:
        wait_until(lambda: server.service.holder.current is not None)
        yield server.service.holder.current.index, f"127.0.0.1:{server.service.port}"


@pytest.fixture(scope="module")
def runs(served, tmp_path_factory):
    """Every mqadmin command of this module, run concurrently (each JVM waits ~3 s on exit)."""
    _, namesrv = served
    home = tmp_path_factory.mktemp("mqadmin-home")
    commands = {
        "route_json": ("topicRoute", "-t", "TBW102"),
        "route_binary": ("topicRoute", "-t", "Topic34"),
        "allocate": ("allocateMQ", "-t", "Topic34", "-i", "client-1,client-2"),
        "missing": ("topicRoute", "-t", "NoSuchTopic"),
        "clusters": ("clusterList",),
        "topics": ("topicList",),
        "topic_clusters": ("topicClusterList", "-t", "Topic34"),
    }

    def run(name: str) -> mqadmin.MQAdminResult:
        kind = "ROCKETMQ" if name == "route_binary" else None
        return mqadmin.run_mqadmin(
            *commands[name], namesrv=namesrv, timeout=45, home=home / name, serialize_type=kind
        )

    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return dict(zip(commands, pool.map(run, commands), strict=True))


def canonical(route: dict) -> dict:
    """TopicRouteData with its lists in a fixed order (Java prints HashMap/List orders)."""
    return {
        "brokerDatas": sorted(route["brokerDatas"], key=lambda b: b["brokerName"]),
        "queueDatas": sorted(route["queueDatas"], key=lambda q: q["brokerName"]),
        "filterServerTable": route.get("filterServerTable") or {},
        **({"orderTopicConf": route["orderTopicConf"]} if "orderTopicConf" in route else {}),
    }


def expected_route(index: RouteIndex, topic: str) -> dict:
    return canonical(json.loads(index.route_body(topic).standard))


def ok(result: mqadmin.MQAdminResult) -> mqadmin.MQAdminResult:
    assert result.error is None, f"{result.error}\nstdout: {result.stdout[-2000:]}"
    return result


@pytest.mark.parametrize(("run", "topic"), [("route_json", "TBW102"), ("route_binary", "Topic34")])
def test_topic_route(served, runs, run, topic):
    """JSON and ROCKETMQ (binary) headers: the client's TopicRouteData is the table's route."""
    index, _ = served
    route = mqadmin.parse_topic_route(ok(runs[run]).stdout)
    assert canonical(route) == expected_route(index, topic)
    assert route["brokerDatas"] and route["queueDatas"]


def test_allocate_uses_readable_queues(served, runs):
    """The client's own route -> MessageQueue logic: readable queues only, all of them."""
    index, _ = served
    result = json.loads(ok(runs["allocate"]).stdout)["result"]
    got = sorted((mq["brokerName"], mq["queueId"]) for queues in result.values() for mq in queues)
    want = sorted(
        (q["brokerName"], i)
        for q in index.route("Topic34")["queueDatas"]
        if q["perm"] & 4
        for i in range(q["readQueueNums"])
    )
    assert got == want and want  # broker-a0 (perm 2, write-only) gives none
    assert sorted(result) == ["client-1", "client-2"]


def test_missing_topic(runs):
    result = runs["missing"]
    assert result.returncode == 0  # mqadmin exits 0 and prints the exception
    assert result.code == 17
    assert result.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")
    assert result.stdout.strip() == ""


def test_cluster_list(served, runs):
    index, _ = served
    rows = mqadmin.parse_cluster_list(ok_or_broker_stats(runs["clusters"]).stdout)
    want = {
        (cluster, name, int(bid), addr)
        for cluster, names in index.cluster_info["clusterAddrTable"].items()
        for name in names
        for bid, addr in index.cluster_info["brokerAddrTable"][name]["brokerAddrs"].items()
    }
    assert {(r.cluster, r.broker_name, r.broker_id, r.addr) for r in rows} == want
    assert len(rows) == len(want) == 10
    assert all(r.addr.startswith("127.") for r in rows)


def ok_or_broker_stats(result: mqadmin.MQAdminResult) -> mqadmin.MQAdminResult:
    """clusterList then asks each broker for runtime stats: no broker runs, so each of those
    calls fails (printed, not fatal). Anything else failing is an error."""
    assert not result.timed_out and result.returncode == 0
    other = [
        line
        for line in (result.error or "").splitlines()
        if not re.search(r"RemotingSendRequestException: send request to </127\.", line)
        and not re.search(r"RemotingConnectException: connect to <?127\.", line)
    ]
    assert not other, other
    return result


def test_topic_list(served, runs):
    index, _ = served
    topics = mqadmin.parse_topic_list(ok(runs["topics"]).stdout)
    assert sorted(topics) == list(index.topics)
    assert len(topics) == 32


def test_topic_cluster_list(served, runs):
    """Route and ClusterInfo together: the cluster of the route's first broker."""
    index, _ = served
    first = index.route("Topic34")["brokerDatas"][0]["brokerName"]
    want = [c for c, names in index.cluster_info["clusterAddrTable"].items() if first in names]
    assert mqadmin.parse_topic_list(ok(runs["topic_clusters"]).stdout) == want == ["cluster-0"]
