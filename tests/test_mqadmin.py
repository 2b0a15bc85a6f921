"""The lookup service as a real RocketMQ 5.x Java client sees it: mqadmin (rocketmq-tools from
.jars/rocketmq, see scripts/fetch_rocketmq.sh) against the real server over a warehouse built
without Spark from a golden fixture.

The fixture's brokers sit on 10.x addresses; they are moved to 127.x (same octets) before the
tables are written, because `clusterList` asks every listed broker for runtime stats: those
connections must stay on loopback (nothing listens there, so they are refused at once). Its
topics get unit bits in topicSysFlag (TBW102 different ones on each of its 7 brokers), and a
real Java NameServer 5.3.3 is loaded with the same tables (as bench/lookup_bench.py loads it):
the unit-flag topic lists, GET_BROKER_MEMBER_GROUP and GET_NAMESRV_CONFIG are compared
with its answers.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.lookup_bench import register_brokers
from routelake_dev import mqadmin
from routing_lib.core.catalog import TOPIC_QUEUE
from routing_lib.lookup import jsonbody
from routing_lib.lookup.namesrv_config import parse_properties
from routing_lib.lookup.routes import RouteIndex
from routing_lib.remoting.protocol import RequestCode, ResponseCode
from tests.support.lookup_support import (
    RemotingClient,
    ServerThread,
    Warehouse,
    fixture_tables,
    wait_until,
)
from tests.support.process_support import free_port
from tests.support.rocketmq_support import namesrv, port_open, wait_for


def with_unit_flags(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Every topicSysFlag unit-bit combination: topics take 0-3 in name order; TBW102, on
    every broker, takes 0-3 by broker, so Java's pick of its first queue data matters."""
    topics = sorted({row["topic"] for row in tables[TOPIC_QUEUE]})
    brokers = sorted({row["broker_name"] for row in tables[TOPIC_QUEUE]})
    for row in tables[TOPIC_QUEUE]:
        order = brokers.index(row["broker_name"]) if row["topic"] == "TBW102" else None
        row["topic_sys_flag"] = (order if order is not None else topics.index(row["topic"])) % 4
    return tables


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
    Warehouse(root).publish(0, until, with_unit_flags(tables))
    with ServerThread(root) as server:
        wait_until(lambda: server.service.holder.current is not None)
        yield server.service.holder.current.index, f"127.0.0.1:{server.service.port}"


@pytest.fixture(scope="module")
def java(served, tmp_path_factory):
    """The Java NameServer 5.3.3, loaded with the served tables by REGISTER_BROKER: its
    address."""
    port = free_port()
    process = namesrv(tmp_path_factory.mktemp("java-namesrv"), port).start()
    try:
        wait_for(lambda: port_open(port), 90, "the Java NameServer", alive=process.alive)
        tables, _ = fixture_tables()
        # Open until the end: closing the brokers' channel makes Java unregister one of them.
        registrar = RemotingClient(port, timeout_s=10)
        try:
            register_brokers(registrar, with_unit_flags(tables))
            yield f"127.0.0.1:{port}"
        finally:
            registrar.close()
    finally:
        process.stop()


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
            *commands[name],
            namesrv=namesrv,
            timeout=45,
            home=home / name,
            serialize_type=kind,
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
    assert result.error is None, (
        f"{result.error}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}"
    )
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


# -- against the Java NameServer holding the same tables --


def ask_both(served, java, code: int, **ext: str) -> list:
    """The same request to routelake, then to the Java NameServer."""
    answers = []
    for address in (served[1], java):
        client = RemotingClient(int(address.rsplit(":", 1)[1]))
        try:
            answers.append(client.call(code, **ext))
        finally:
            client.close()
    return answers


@pytest.mark.parametrize(
    "code",
    [
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    ],
)
def test_unit_topic_lists_equal_java(served, java, code):
    ours, theirs = ask_both(served, java, code)
    assert (ours.code, ours.remark) == (theirs.code, theirs.remark) == (ResponseCode.SUCCESS, None)
    lists = [jsonbody.parse_legacy(a.body) for a in (ours, theirs)]
    assert set(lists[0]) == set(lists[1]) == {"topicList"}  # no brokerAddr on either
    # a ConcurrentHashMap's order in Java, sorted here: compared as sets
    assert lists[0]["topicList"] == sorted(lists[1]["topicList"])
    assert lists[0]["topicList"]  # each list has topics in this fixture
    if code != RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST:
        # TBW102's flags differ per broker: Java's HashMap picked the same queue data
        index, _ = served
        flagged = {q["brokerName"]: q["topicSysFlag"] for q in index.route("TBW102")["queueDatas"]}
        assert len(set(flagged.values())) == 4


def test_broker_member_group_equals_java(served, java):
    index, _ = served
    groups = sorted(index.cluster_info["brokerAddrTable"])
    for name in [*groups, "no-such-broker"]:
        cluster = index.cluster_info["brokerAddrTable"].get(name, {}).get("cluster", "Nowhere")
        ours, theirs = ask_both(
            served, java, RequestCode.GET_BROKER_MEMBER_GROUP, clusterName=cluster, brokerName=name
        )
        # the remark Java's createResponseCommand sets and this handler never clears
        assert (ours.code, ours.remark) == (theirs.code, theirs.remark)
        assert (ours.code, ours.remark) == (0, "not set any response code")
        assert jsonbody.parse_legacy(ours.body) == jsonbody.parse_legacy(theirs.body), name
    # A missing field: 5.3.3's header decoder logs it and the handler answers with a null.
    for ext in ({"brokerName": groups[0]}, {"clusterName": "c"}, {}):
        ours, theirs = ask_both(served, java, RequestCode.GET_BROKER_MEMBER_GROUP, **ext)
        assert (ours.code, ours.remark) == (theirs.code, theirs.remark), ext
        assert jsonbody.parse_legacy(ours.body) == jsonbody.parse_legacy(theirs.body), ext


def test_namesrv_config_equals_java(served, java):
    """Every setting routelake reports in GET_NAMESRV_CONFIG has the Java NameServer's value;
    both run with the defaults. (`mqadmin getNamesrvConfig` / `updateNamesrvConfig` against
    routelake: tests/test_mqadmin_admin.py.)"""
    raw_ours, raw_theirs = ask_both(served, java, RequestCode.GET_NAMESRV_CONFIG)
    assert (raw_ours.code, raw_ours.remark) == (raw_theirs.code, raw_theirs.remark) == (0, None)
    ours = parse_properties(raw_ours.body.decode("latin-1"))
    theirs = parse_properties(raw_theirs.body.decode("latin-1"))
    assert set(ours) == {
        "enableAllTopicList",
        "enableTopicList",
        "orderMessageEnable",
        "supportActingMaster",
    }
    assert len(theirs) > 30  # NamesrvConfig and NettyServerConfig: ours is a part of it
    assert ours == {key: theirs[key] for key in ours}
