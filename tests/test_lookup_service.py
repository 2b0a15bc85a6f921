"""Lookup service: RouteIndex, request processing, HTTP API, refresher, and one end-to-end run
of the real server over a small Delta warehouse written with delta-rs (no Spark)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from routing_lib.core.catalog import TOPIC_BASE
from routing_lib.core.replay import default_watermark, fleet_rows, replay
from routing_lib.core.tables import (
    BROKER_ADDR,
    BROKER_LIVE,
    FILTER_SERVER,
    PROGRESS,
    TOPIC_QUEUE,
)
from routing_lib.lookup import jsonbody
from routing_lib.lookup import topics as topic_rules
from routing_lib.lookup.consistency import SnapshotNotSettledError, load_settled
from routing_lib.lookup.processor import FAQ_URL, answer
from routing_lib.lookup.refresher import Refresher, Served, SnapshotHolder
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.server import create_app
from routing_lib.lookup.topics import validate_topic
from routing_lib.read.warehouse import WarehouseSnapshot
from routing_lib.remoting.frames import (
    RPC_ONEWAY,
    RPC_RESPONSE,
    FrameDecoder,
    RemotingCommand,
    SerializeType,
    encode,
)
from routing_lib.remoting.protocol import (
    ADMIN_CODES,
    BROKER_CODES,
    NAMESRV_VERSION,
    READ_CODES,
    RequestCode,
    ResponseCode,
)
from routing_lib.remoting.service_metrics import Metrics
from schemas import parse_event
from tests.support.lookup_support import (
    GOLDEN,
    VERSIONS,
    AppClient,
    RemotingClient,
    ServerThread,
    Warehouse,
    closed_by_peer,
    snapshot,
    tables,
    wait_until,
)
from tests.support.metrics_support import sample
from tests.support.snapshot_support import group_layout, upserts
from tests.support.writer_support import WriterWarehouse, last_commit_files


@pytest.fixture(scope="module")
def index() -> RouteIndex:
    return RouteIndex(snapshot())


def test_route_as_pickup_topic_route_data(index):
    assert index.route("Orders") == {
        "brokerDatas": [
            {
                "brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"},
                "brokerName": "broker-a",
                "cluster": "ClusterA",
                "enableActingMaster": False,
                "zoneName": "zone-1",
            },
            {
                "brokerAddrs": {0: "10.0.1.1:10911"},
                "brokerName": "broker-b",
                "cluster": "ClusterA",
                "enableActingMaster": False,
            },
        ],
        "filterServerTable": {"10.0.0.1:10911": ["10.0.0.1:30000"]},
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "perm": 6,
                "readQueueNums": 8,
                "topicSysFlag": 0,
                "writeQueueNums": 8,
            },
            {
                "brokerName": "broker-b",
                "perm": 6,
                "readQueueNums": 4,
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            },
        ],
    }
    assert index.route("Lonely") is None  # its only broker is not in brokerAddrTable
    assert index.route("Nope") is None
    half = index.route("Half")  # queueDatas keep every broker, brokerDatas the known ones
    assert [q["brokerName"] for q in half["queueDatas"]] == ["broker-b", "broker-gone"]
    assert [b["brokerName"] for b in half["brokerDatas"]] == ["broker-b"]
    assert half["filterServerTable"] == {}  # filter servers only for the route's brokers


def test_route_bodies_both_forms(index):
    body = index.route_body("Orders")
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in body.legacy
    assert b'"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}' in body.standard
    assert jsonbody.parse_legacy(body.legacy) == json.loads(body.standard)
    assert index.route_body("Lonely") is None


def test_acting_master_off_by_default(index):
    assert index.route("Acting")["brokerDatas"][0]["brokerAddrs"] == {
        1: "10.0.2.1:10911",
        2: "10.0.2.2:10911",
        12: "10.0.2.12:10911",
    }


def test_acting_master_rewrite():
    acting = RouteIndex(snapshot(), support_acting_master=True)
    # Queues lost write perm, no master, enableActingMaster: min id presented as master.
    assert acting.route("Acting")["brokerDatas"][0]["brokerAddrs"] == {
        0: "10.0.2.1:10911",
        2: "10.0.2.2:10911",
        12: "10.0.2.12:10911",
    }
    # Numeric order in both forms (not "12" before "2").
    assert (
        b'"brokerAddrs":{"0":"10.0.2.1:10911","2":"10.0.2.2:10911","12":"10.0.2.12:10911"}'
    ) in acting.route_body("Acting").standard
    # Still writable: no rewrite. The sync-member system topics are never rewritten.
    assert 0 not in acting.route("ActingRW")["brokerDatas"][0]["brokerAddrs"]
    sync = acting.route("rmq_sys_SYNC_BROKER_MEMBER_broker-c")
    assert 0 not in sync["brokerDatas"][0]["brokerAddrs"]
    # Groups with a master are untouched; the shared index data is not mutated.
    assert acting.route("Orders") == RouteIndex(snapshot()).route("Orders")
    assert acting.cluster_info["brokerAddrTable"]["broker-c"]["brokerAddrs"] == {
        1: "10.0.2.1:10911",
        2: "10.0.2.2:10911",
        12: "10.0.2.12:10911",
    }


def test_acting_master_needs_the_broker_flag():
    rows = tables()
    for row in rows[BROKER_ADDR]:
        row["enable_acting_master"] = False
    plain = RouteIndex(WarehouseSnapshot(rows, {}, None), support_acting_master=True)
    assert 0 not in plain.route("Acting")["brokerDatas"][0]["brokerAddrs"]


def test_cluster_info_and_topic_lists(index):
    assert index.cluster_info["clusterAddrTable"] == {
        "ClusterA": ["broker-a", "broker-b"],
        "ClusterB": ["broker-c"],
    }
    assert sorted(index.cluster_info["brokerAddrTable"]) == ["broker-a", "broker-b", "broker-c"]
    assert b'"brokerAddrs":{0:"10.0.0.1:10911"' in index.cluster_info_body.legacy
    assert json.loads(index.topic_list_body.standard)["topicList"] == [
        "Acting",
        "ActingRW",
        "Half",
        "Lonely",
        "Orders",
        "TBW102",
        "rmq_sys_SYNC_BROKER_MEMBER_broker-c",
    ]
    assert index.cluster_topics["ClusterA"] == ("Half", "Orders", "TBW102")
    assert json.loads(index.topics_by_cluster_body("ClusterB").standard)["topicList"] == [
        "Acting",
        "ActingRW",
        "rmq_sys_SYNC_BROKER_MEMBER_broker-c",
    ]
    assert json.loads(index.topics_by_cluster_body("Unknown").standard) == {"topicList": []}
    # getSystemTopicList: cluster and broker names, and one broker address.
    assert index.system_topic_list == {
        "brokerAddr": "10.0.0.1:10911",
        "topicList": ["ClusterA", "ClusterB", "broker-a", "broker-b", "broker-c"],
    }
    assert index.system_topics == (
        "ClusterA",
        "ClusterB",
        "TBW102",
        "broker-a",
        "broker-b",
        "broker-c",
        "rmq_sys_SYNC_BROKER_MEMBER_broker-c",
    )
    assert [(b["clusterName"], b["brokerAddr"]) for b in index.live_brokers] == [
        ("ClusterA", "10.0.0.1:10911"),
        ("ClusterA", "10.0.1.1:10911"),
        ("ClusterB", "10.0.2.1:10911"),
    ]


def test_index_is_read_only(index):
    with pytest.raises(TypeError):
        index.versions["topic_queue_table"] = 9  # type: ignore[index]
    with pytest.raises(AttributeError):
        index.new_attribute = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "name", sorted(p.name for p in GOLDEN.iterdir() if (p / "expected.json").exists())
)
def test_golden_states(name):
    """Built from the reference replay: ClusterInfo and routes agree with expected.json."""
    lines = (GOLDEN / name / "events.jsonl").read_text().splitlines()
    events = [parse_event(line) for line in lines]
    until = default_watermark(events, 10_000)
    built = RouteIndex(WarehouseSnapshot(fleet_rows(replay(events, until).values()), {}, until))
    expected = json.loads((GOLDEN / name / "expected.json").read_text())
    info = json.loads(built.cluster_info_body.standard)
    assert info["clusterAddrTable"] == expected["clusterAddrTable"]
    assert {
        n: {k: b[k] for k in ("cluster", "brokerName", "brokerAddrs")}
        for n, b in info["brokerAddrTable"].items()
    } == {
        n: {k: b[k] for k in ("cluster", "brokerName", "brokerAddrs")}
        for n, b in expected["brokerAddrTable"].items()
    }
    assert list(built.topics) == sorted(expected["topicQueueTable"])
    for topic, queues in expected["topicQueueTable"].items():
        route = built.route(topic)
        if not set(queues) & set(expected["brokerAddrTable"]):
            assert route is None
            continue
        assert {q["brokerName"]: q for q in route["queueDatas"]} == queues
        assert {b["brokerName"] for b in route["brokerDatas"]} == (
            set(queues) & set(expected["brokerAddrTable"])
        )


def test_golden_acting_master_fixture():
    lines = (GOLDEN / "11_acting_master_perm_wipe" / "events.jsonl").read_text().splitlines()
    events = [parse_event(line) for line in lines]
    until = default_watermark(events, 10_000)
    snap = WarehouseSnapshot(fleet_rows(replay(events, until).values()), {}, until)
    assert RouteIndex(snap).route("Orders")["brokerDatas"][0]["brokerAddrs"] == {
        1: "10.0.0.2:10911"
    }
    assert RouteIndex(snap, True).route("Orders")["brokerDatas"][0]["brokerAddrs"] == {
        0: "10.0.0.2:10911"
    }


def _renamed_broker_events(heartbeat_at: int | None) -> list:
    """One address registered as broker-b (with filter servers), then as broker-a (with
    others); broker-b's heartbeat at `heartbeat_at` makes it the address's latest again."""

    def register(name: str, at: int, filters: list[str]) -> dict:
        return {
            "eventType": "REGISTER",
            "eventTime": at,
            "clusterName": "C",
            "brokerAddr": "10.1.0.1:10911",
            "brokerName": name,
            "brokerId": 0,
            "dataVersion": {"stateVersion": 0, "timestamp": at, "counter": 1},
            "topicConfigTable": {f"T-{name}": {"topicName": f"T-{name}"}},
            "filterServerList": filters,
        }

    records = [
        register("broker-b", 1_000, ["10.1.0.1:30000"]),
        register("broker-a", 2_000, ["10.1.0.1:30001"]),
    ]
    if heartbeat_at is not None:
        head = ("clusterName", "brokerAddr", "brokerName", "brokerId")
        beat = {"eventType": "HEARTBEAT", "eventTime": heartbeat_at}
        records.append({**beat, **{k: records[0][k] for k in head}})
    return [parse_event(json.dumps(r)) for r in records]


def test_one_address_under_two_broker_names_is_one_live_entry():
    """A broker renamed in place: broker_live_table and filter_server_table have a row per
    brokerName; the lookup answers one live entry and one filter-server list per address,
    the latest registration's, and follows it when only the live rows change."""
    until = 5_000
    tables = fleet_rows(replay(_renamed_broker_events(None), until).values())
    assert len(tables[BROKER_LIVE]) == len(tables[FILTER_SERVER]) == 2
    index = RouteIndex(WarehouseSnapshot(tables, {"v": 1}, until))
    [live] = index.live_brokers
    assert (live["brokerName"], live["lastUpdateTimestamp"]) == ("broker-a", 2_000)
    filters = {"10.1.0.1:10911": ["10.1.0.1:30001"]}
    for topic in ("T-broker-a", "T-broker-b"):
        assert index.route(topic)["filterServerTable"] == filters
        assert json.loads(index.route_body(topic).standard)["filterServerTable"] == filters
    # broker-b's heartbeat: only broker_live_table changes, and the answers follow it
    later = fleet_rows(replay(_renamed_broker_events(4_000), until).values())
    assert later[FILTER_SERVER] == tables[FILTER_SERVER]
    next_index = RouteIndex.assemble(
        index.store,
        {BROKER_LIVE: later[BROKER_LIVE]},
        {"v": 2},
        until,
        previous=index,
        changed_topics=frozenset(),
    )
    [live] = next_index.live_brokers
    assert (live["brokerName"], live["lastUpdateTimestamp"]) == ("broker-b", 4_000)
    filters = {"10.1.0.1:10911": ["10.1.0.1:30000"]}
    for topic in ("T-broker-a", "T-broker-b"):
        assert next_index.route(topic)["filterServerTable"] == filters
        assert json.loads(next_index.route_body(topic).standard)["filterServerTable"] == filters


# -- request processing --


def request(code, kind=SerializeType.JSON, version=NAMESRV_VERSION, flag=0, **ext):
    return RemotingCommand(
        code=code, version=version, opaque=77, flag=flag, ext_fields=ext, serialize_type=kind
    )


@pytest.mark.parametrize("kind", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_route_request(index, kind):
    response = answer(index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, kind, topic="Orders"))
    assert (response.code, response.opaque, response.is_response) == (0, 77, True)
    assert response.serialize_type == kind and response.remark is None
    assert response.body == index.route_body("Orders").standard  # client >= V4_9_4
    old = answer(
        index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, kind, version=399, topic="Orders")
    )
    assert old.body == index.route_body("Orders").legacy
    asked = answer(
        index,
        request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            kind,
            version=0,
            topic="Orders",
            acceptStandardJsonOnly="true",
        ),
    )
    assert asked.body == index.route_body("Orders").standard


def test_route_request_errors(index):
    missing = answer(index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Lonely"))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST == 17
    assert missing.remark == (
        "No topic route info in name server for the topic: Lonely"
        f"\nSee {FAQ_URL} for further details."
    )
    assert missing.body == b""
    bad = answer(index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="no spaces"))
    assert bad.code == ResponseCode.INVALID_PARAMETER and "illegal characters" in bad.remark
    assert (
        answer(index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="x" * 128)).code
        == ResponseCode.INVALID_PARAMETER
    )
    assert (
        answer(index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="%RETRY%" + "x" * 200)).code
        == ResponseCode.TOPIC_NOT_EXIST
    )
    assert (
        answer(index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC)).code == ResponseCode.SYSTEM_ERROR
    )


def test_the_lookup_answers_every_read_code_and_no_write_code(index):
    # READ_CODES is every code that is neither a broker's nor an operator's: a code added to
    # the protocol has to be answered here or be listed with the collector's.
    assert not (READ_CODES & (BROKER_CODES | ADMIN_CODES)) and not (BROKER_CODES & ADMIN_CODES)
    assert READ_CODES | BROKER_CODES | ADMIN_CODES == set(RequestCode)
    fields = {"topic": "Orders", "cluster": "ClusterA", "namespace": "team", "key": "pager"}
    for code in READ_CODES:
        response = answer(index, request(code, **fields))
        assert response.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED, code.name
    for code in BROKER_CODES | ADMIN_CODES:
        response = answer(index, request(code, **fields))
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, code.name


def test_other_requests(index):
    assert (
        answer(index, request(RequestCode.GET_BROKER_CLUSTER_INFO)).body
        == index.cluster_info_body.legacy
    )
    assert (
        answer(index, request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body
        == index.topic_list_body.legacy
    )
    assert answer(index, request(RequestCode.GET_TOPICS_BY_CLUSTER, cluster="ClusterA")).body == (
        index.topics_by_cluster_body("ClusterA").legacy
    )
    assert (
        answer(index, request(RequestCode.GET_TOPICS_BY_CLUSTER)).code == ResponseCode.SYSTEM_ERROR
    )
    assert (
        answer(index, request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)).body
        == index.system_topic_list_body.legacy
    )
    unsupported = answer(index, request(RequestCode.REGISTER_BROKER))
    assert unsupported.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert unsupported.remark == " request type 103 not supported"
    assert (
        answer(index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, flag=RPC_ONEWAY, topic="Orders"))
        is None
    )
    assert (
        answer(
            index, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, flag=RPC_RESPONSE, topic="Orders")
        )
        is None
    )
    not_ready = answer(None, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders"))
    assert (not_ready.code, not_ready.remark) == (1, "name server not ready")


def test_topic_validator():
    assert validate_topic("Orders") is None and validate_topic("%DLQ%g|x-1_2") is None
    assert validate_topic(" \t") == "The specified topic is blank."
    assert validate_topic("a/b").startswith("The specified topic: a/b, contains illegal")
    assert validate_topic("ü") is not None


def test_topic_validator_keeps_valid_topics_only_and_a_bounded_number():
    """Valid topics are remembered (a set lookup per request), a bounded number of them;
    an invalid one never is, so it is refused every time."""
    topic_rules._VALID.clear()
    for _ in range(2):
        assert validate_topic("a/b") is not None and "a/b" not in topic_rules._VALID
        assert validate_topic(None) == "The specified topic is blank."
    for i in range(topic_rules.MAX_KEPT_VALID + 10):
        assert validate_topic(f"T{i}") is None
        assert len(topic_rules._VALID) <= topic_rules.MAX_KEPT_VALID
    assert "T0" not in topic_rules._VALID and validate_topic("T0") is None


# -- HTTP app and refresher, without Delta --


def test_openapi_document_lists_the_api():
    document = AppClient(create_app(SnapshotHolder(), Metrics())).get("/openapi.json").json()
    assert {
        "/topics/{topic}/route",
        "/topics",
        "/clusters",
        "/clusters/{cluster}/topics",
        "/brokers/live",
        "/healthz",
        "/readyz",
    } <= set(document["paths"])


def test_http_api_in_process(index):
    holder, metrics = SnapshotHolder(), Metrics()
    client = AppClient(create_app(holder, metrics))
    assert client.get("/readyz").status_code == 503
    assert client.get("/topics/Orders/route").status_code == 503
    assert client.get("/healthz").json()["data"] == {"status": "ok"}
    holder.current = Served.of(index)
    ok = client.get("/topics/Orders/route")
    assert ok.status_code == 200 and ok.headers["x-routelake-watermark"] == "1764000050000"
    assert "topic_queue_table=3" in ok.headers["x-routelake-versions"]
    envelope = ok.json()
    assert envelope["versions"] == VERSIONS and envelope["watermark"] == 1_764_000_050_000
    assert envelope["data"]["brokerDatas"][0]["brokerAddrs"] == {
        "0": "10.0.0.1:10911",
        "1": "10.0.0.2:10911",
    }
    assert client.get("/topics/Lonely/route").json()["error"]["code"] == 17
    assert client.get("/topics/a%20b/route").status_code == 400
    assert client.get("/topics/%25RETRY%25g/route").status_code == 404
    assert client.get("/clusters").json()["data"]["clusterAddrTable"]["ClusterB"] == ["broker-c"]
    assert client.get("/clusters/ClusterB/topics").json()["data"]["topicList"][0] == "Acting"
    assert client.get("/clusters/Nope/topics").status_code == 404
    assert len(client.get("/brokers/live").json()["data"]) == 3
    assert "TBW102" in client.get("/topics/system").json()["data"]["topicList"]
    assert client.get("/readyz").status_code == 200
    text = client.get("/metrics").text
    route_requests = sample(
        text,
        "routelake_lookup_requests_total",
        protocol="http",
        request="/topics/{topic}/route",
        code="200",
        result="ok",
    )
    assert route_requests == 1
    assert sample(text, "routelake_lookup_requests_total", code="404", result="not_found")
    assert sample(text, "routelake_lookup_table_version", table="topic_queue_table") == 3
    assert sample(text, "routelake_lookup_request_duration_seconds_count", protocol="http")
    assert sample(text, "routelake_lookup_snapshot_age_seconds") is not None


def test_refresher_keeps_last_good(tmp_path):
    """A read of the next snapshot fails (its data files are gone): the index served stays,
    and the next poll once they are back serves the new batch."""
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, group_layout(upserts(tables())))
    holder, metrics = SnapshotHolder(), Metrics()
    refresher = Refresher(tmp_path, holder, metrics)
    assert asyncio.run(refresher.refresh_once()) == "swapped"
    first = holder.current
    orders = ("upsert", tables(orders_queues=2)[TOPIC_QUEUE][0])
    wh.publish(1, 2_000, group_layout({TOPIC_QUEUE: [orders]}))
    added = last_commit_files(tmp_path / TOPIC_BASE)  # its data and change-data files
    for path in added:
        path.rename(path.with_name(path.name + ".away"))
    # The versions settle (the log is whole); reading the batch's rows fails.
    assert asyncio.run(refresher.refresh_once()) == "error"
    assert holder.current is first
    assert (metrics.refreshes["swapped"], metrics.refreshes["error"]) == (1, 1)
    error = metrics.last_refresh_error
    assert error.startswith("FileNotFoundError") and any(p.name in error for p in added), error
    for path in added:
        path.with_name(path.name + ".away").rename(path)
    assert asyncio.run(refresher.refresh_once()) == "swapped"
    assert holder.current.index.watermark == 2_000
    orders = json.loads(holder.current.index.route_body("Orders").standard)["queueDatas"]
    assert [q["readQueueNums"] for q in orders if q["brokerName"] == "broker-a"] == [2]


def test_refresher_serves_a_published_batch_before_the_next_poll(tmp_path):
    """With a poll every 60 s, a batch is served within a few change checks of its progress
    commit (the stat of route_progress's next commit file), not at the next poll; a route
    table committed without progress is not a reason to poll."""
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, group_layout(upserts(tables())))
    holder, metrics = SnapshotHolder(), Metrics()
    refresher = Refresher(tmp_path, holder, metrics)
    orders = ("upsert", tables(orders_queues=2)[TOPIC_QUEUE][0])

    async def scenario() -> tuple[float, int]:
        stop = asyncio.Event()
        task = asyncio.create_task(refresher.run(60.0, stop))
        await wait_async(lambda: holder.current is not None)
        await asyncio.to_thread(wh.merge, TOPIC_BASE, [orders], 1)
        await asyncio.sleep(0.5)  # change checks run; the batch is not published yet
        polls = sum(metrics.refreshes.values())
        assert holder.current.index.watermark == 1_000
        await asyncio.to_thread(wh.progress, 1, 2_000)
        committed = time.monotonic()
        await wait_async(lambda: holder.current.index.watermark == 2_000)
        served_after = time.monotonic() - committed
        stop.set()
        await task
        return served_after, polls

    served_after, polls_before_progress = asyncio.run(scenario())
    assert polls_before_progress == 1  # the first load only
    assert served_after < 5.0, served_after  # a poll would have come after 60 s
    assert not refresher.published_since_served()


def test_refresher_has_no_change_check_on_object_storage():
    refresher = Refresher("s3://bucket/warehouse", SnapshotHolder(), Metrics())
    assert not refresher.published_since_served()
    assert refresher._next_progress_commit is None


async def wait_async(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# -- end to end: real Delta tables, real server --


def test_settled_snapshot_detection(tmp_path):
    wh = Warehouse(tmp_path)
    wh.publish(0, 1000, tables())
    assert load_settled(tmp_path).watermark == 1000
    wh.write(TOPIC_QUEUE, tables(orders_queues=4)[TOPIC_QUEUE], 1)  # batch 1 half-committed
    with pytest.raises(SnapshotNotSettledError, match="topic_queue_table"):
        load_settled(tmp_path)
    wh.progress(1, 2000)
    assert load_settled(tmp_path).watermark == 2000


def test_server_end_to_end(tmp_path):
    wh = Warehouse(tmp_path)
    old_w, new_w = 1_764_000_050_000, 1_764_000_060_000
    wh.publish(0, old_w, tables())
    with ServerThread(tmp_path, max_frame_bytes=4096) as server:
        service = server.service
        http = httpx.Client(base_url=f"http://127.0.0.1:{service.http_port}", timeout=5)
        wait_until(lambda: http.get("/readyz").status_code == 200)

        # Remoting, both serializations, several requests on one connection.
        client = RemotingClient(service.port)
        for kind in (SerializeType.JSON, SerializeType.ROCKETMQ):
            response = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, kind, topic="Orders")
            assert response.code == ResponseCode.SUCCESS and response.serialize_type == kind
            route = json.loads(response.body)
            assert route["brokerDatas"][0]["brokerAddrs"] == {
                "0": "10.0.0.1:10911",
                "1": "10.0.0.2:10911",
            }
            assert (
                client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, kind, topic="Lonely").code
                == ResponseCode.TOPIC_NOT_EXIST
            )
            assert (
                client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, kind, topic="bad topic!").code
                == ResponseCode.INVALID_PARAMETER
            )
            assert client.call(999, kind).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        info = jsonbody.parse_legacy(client.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert info["clusterAddrTable"]["ClusterA"] == ["broker-a", "broker-b"]
        assert (
            json.loads(client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)[
                "topicList"
            ][0]
            == "Acting"
        )
        assert json.loads(client.call(RequestCode.GET_TOPICS_BY_CLUSTER, cluster="ClusterB").body)[
            "topicList"
        ] == [
            "Acting",
            "ActingRW",
            "rmq_sys_SYNC_BROKER_MEMBER_broker-c",
        ]
        assert (
            json.loads(client.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body)["brokerAddr"]
            == "10.0.0.1:10911"
        )

        # HTTP, with the snapshot's versions and watermark on every JSON response.
        got = http.get("/topics/Orders/route")
        assert got.status_code == 200 and got.json()["watermark"] == old_w
        assert got.json()["versions"]["route_progress"] == 0
        assert http.get("/topics").json()["data"]["topicList"][0] == "Acting"
        assert http.get("/brokers/live").json()["watermark"] == old_w

        # A stalled half-frame on one connection and a garbage frame on another do not
        # disturb a third client; the bad ones get closed.
        stalled = socket.create_connection(("127.0.0.1", service.port))
        stalled.sendall(
            encode(
                RemotingCommand(
                    code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "Orders"}
                )
            )[:10]
        )
        garbage = socket.create_connection(("127.0.0.1", service.port))
        garbage.sendall(b"\x00\x00\x00\x08\x09\x00\x00\x00garbage!")
        oversize = socket.create_connection(("127.0.0.1", service.port))
        oversize.sendall((1 << 20).to_bytes(4, "big"))
        assert closed_by_peer(garbage) and closed_by_peer(oversize)
        # A client that sends a lot and never reads its answers only stalls itself.
        deaf = socket.create_connection(("127.0.0.1", service.port))

        def flood() -> None:
            with contextlib.suppress(OSError):  # ~20 MB of requests, far beyond the buffers
                deaf.sendall(
                    encode(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)) * 200_000
                )

        flooder = threading.Thread(target=flood, daemon=True)
        flooder.start()
        time.sleep(0.5)
        assert flooder.is_alive()  # back-pressure: the server stopped reading from it
        assert (
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders").code
            == ResponseCode.SUCCESS
        )
        assert http.get("/clusters").status_code == 200
        stalled.close()
        deaf.shutdown(socket.SHUT_RDWR)
        deaf.close()
        flooder.join(5)

        # Refresh while clients loop: every answer is the old or the new state, whole.
        old_route = http.get("/topics/Orders/route").json()["data"]
        failures: list[str] = []
        seen: dict[str, set] = {"http": set(), "remoting": set()}
        stop = threading.Event()

        def classify(route: dict) -> str:
            shape = (
                route["queueDatas"][0]["readQueueNums"],
                route["brokerDatas"][0]["brokerAddrs"]["0"],
            )
            return {(8, "10.0.0.1:10911"): "old", (4, "10.0.0.9:10911"): "new"}.get(
                shape, f"mixed {shape}"
            )

        def http_loop() -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{service.http_port}", timeout=5) as c:
                while not stop.is_set():
                    r = c.get("/topics/Orders/route")
                    if r.status_code != 200:
                        failures.append(f"http {r.status_code}")
                        continue
                    body = r.json()
                    state = classify(body["data"])
                    expected_w = {"old": old_w, "new": new_w}.get(state)
                    if body["watermark"] != expected_w:
                        failures.append(f"http {state} with watermark {body['watermark']}")
                    seen["http"].add(state)

        def remoting_loop() -> None:
            c = RemotingClient(service.port)
            try:
                while not stop.is_set():
                    r = c.call(
                        RequestCode.GET_ROUTEINFO_BY_TOPIC, SerializeType.ROCKETMQ, topic="Orders"
                    )
                    if r.code != 0:
                        failures.append(f"remoting code {r.code}")
                        continue
                    seen["remoting"].add(classify(json.loads(r.body)))
            finally:
                c.close()

        loops = [threading.Thread(target=http_loop), threading.Thread(target=remoting_loop)]
        for t in loops:
            t.start()
        try:
            time.sleep(0.2)
            new = tables(orders_queues=4, master_a="10.0.0.9:10911")
            # Route tables one by one with pauses longer than the poll interval, then the
            # progress row: only the complete batch may ever be served.
            wh.publish(
                1,
                new_w,
                {t: new[t] for t in (TOPIC_QUEUE, BROKER_ADDR, BROKER_LIVE, FILTER_SERVER)},
                pause_s=0.2,
            )
            wait_until(lambda: http.get("/topics/Orders/route").json()["watermark"] == new_w)
            time.sleep(0.2)
        finally:
            stop.set()
            for t in loops:
                t.join(10)
        assert not failures, failures[:5]
        assert all(states <= {"old", "new"} for states in seen.values()), seen
        assert seen["http"] == {"old", "new"} and "new" in seen["remoting"]
        assert classify(old_route) == "old"
        assert (
            json.loads(client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders").body)[
                "queueDatas"
            ][0]["readQueueNums"]
            == 4
        )

        # Metrics reflect it all; a broken warehouse keeps the last good snapshot.
        text = http.get("/metrics").text
        assert sample(
            text, "routelake_lookup_requests_total", protocol="remoting", request="105", code="0"
        )
        assert sample(text, "routelake_lookup_frame_errors_total", reason="FrameTooLargeError") == 1
        assert sample(text, "routelake_lookup_refreshes_total", result="not_settled")
        assert sample(text, "routelake_lookup_table_version", table="route_progress") == 1
        for entry in (tmp_path / PROGRESS / "_delta_log").iterdir():
            entry.unlink()
        wait_until(lambda: service.metrics.refreshes["error"] > 0)
        assert http.get("/topics/Orders/route").json()["watermark"] == new_w
        assert (
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders").code
            == ResponseCode.SUCCESS
        )
        client.close()
        http.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_cleanly_on_signal(tmp_path, sig):
    Warehouse(tmp_path).publish(0, 1000, tables())
    code = (
        "from routing_lib.lookup.server import serve; "
        f"serve({str(tmp_path)!r}, 0, 0, 0.05, 1 << 20, False)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        lines = []
        for line in proc.stderr:  # wait for the listening line, then for the first snapshot
            lines.append(line)
            if "- ready" in line:
                break
        assert any("lookup service: remoting on 127.0.0.1:" in x for x in lines), lines
        proc.send_signal(sig)
        assert proc.wait(timeout=15) == 0
        assert "lookup service stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_request_whose_answer_raises_gets_system_error(tmp_path, monkeypatch):
    """The listener's last line of defence: an exception while answering is logged and
    answered with SYSTEM_ERROR; the connection and the server go on."""
    Warehouse(tmp_path).publish(0, 1000, tables())

    def broken(self, topic, standard):
        raise RuntimeError("injected failure")

    with ServerThread(tmp_path) as server:
        wait_until(lambda: server.service.holder.current is not None)
        client = RemotingClient(server.service.port)
        monkeypatch.setattr(RouteIndex, "route_bytes", broken)
        failed = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders")
        assert (failed.code, failed.remark) == (ResponseCode.SYSTEM_ERROR, "internal error")
        monkeypatch.undo()
        assert (
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders").code
            == ResponseCode.SUCCESS
        )
        client.close()


def test_pipelined_requests_are_answered_in_one_write(tmp_path, monkeypatch):
    """Requests that arrive in one read are answered with one write (a send() each cost more
    than answering), every answer there and in order."""
    Warehouse(tmp_path).publish(0, 1_764_000_050_000, tables())
    writes: list[int] = []
    real_write, real_writelines = asyncio.StreamWriter.write, asyncio.StreamWriter.writelines

    def counted_write(self, data):
        writes.append(1)
        return real_write(self, data)

    def counted_writelines(self, data):
        pieces = list(data)
        writes.append(len(pieces))
        return real_writelines(self, pieces)

    monkeypatch.setattr(asyncio.StreamWriter, "write", counted_write)
    monkeypatch.setattr(asyncio.StreamWriter, "writelines", counted_writelines)
    with ServerThread(tmp_path) as server:
        wait_until(lambda: server.service.holder.current is not None)
        requests = [
            RemotingCommand(
                code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                version=NAMESRV_VERSION,
                opaque=100 + i,
                ext_fields={"topic": "Orders" if i % 2 else "Lonely"},
            )
            for i in range(8)
        ]
        with socket.create_connection(("127.0.0.1", server.service.port), timeout=5) as sock:
            writes.clear()
            sock.sendall(b"".join(encode(r) for r in requests))
            decoder, answers = FrameDecoder(), []
            while len(answers) < len(requests):
                answers += decoder.feed(sock.recv(65536))
    assert [a.opaque for a in answers] == [r.opaque for r in requests]
    assert [a.code for a in answers] == [
        ResponseCode.SUCCESS if i % 2 else ResponseCode.TOPIC_NOT_EXIST for i in range(8)
    ]
    assert writes == [8], writes  # one writelines of the 8 answers


@pytest.mark.parametrize("multiprocess", [False, True])
def test_requests_counted_together_count_as_one_by_one(multiprocess):
    """A read's requests are counted with one write per value (observe_many): the counters
    and the latency histogram (every bucket, the sum) come out as observe() one by one."""
    observed = [
        ("105", "0", 0.00004),
        ("105", "17", 0.0003),
        ("105", "0", 0.0001),  # on a bucket bound: counted in it (le)
        ("other", "3", 7.5),  # above the last bound: +Inf only
        ("105", "0", 0.002),
    ]

    def exposition(count) -> str:
        with contextlib.ExitStack() as stack:
            if multiprocess:
                from routing_lib.lookup.workers import multiprocess_metrics

                stack.enter_context(multiprocess_metrics())
            metrics = Metrics()
            count(metrics)
            text = generate_latest(metrics.registry).decode()
            return "\n".join(line for line in text.splitlines() if "lookup_request" in line)

    def one_by_one(metrics: Metrics) -> None:
        for request, code, seconds in observed:
            metrics.observe("remoting", request, code, seconds)

    def together(metrics: Metrics) -> None:
        metrics.observe_many("remoting", observed[:2])
        metrics.observe_many("remoting", observed[2:])

    expected = exposition(one_by_one)
    assert 'seconds_bucket{le="0.0001",protocol="remoting"} 2.0' in expected  # le: bound in
    requests = [line for line in expected.splitlines() if "_requests_total{" in line]
    assert len(requests) == 3, requests
    assert exposition(together) == expected
