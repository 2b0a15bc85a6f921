"""The KV config and admin reads: GET_KV_CONFIG (101), GET_KVLIST_BY_NAMESPACE (219),
orderTopicConf, their HTTP equivalents, `routectl kv` / `routectl history admin`, and
warehouses older than the KV and admin tables. Snapshots come from fixture 16 through the
reference replay (no Spark); the end-to-end tests write real Delta tables with delta-rs and run
the real service."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from routing_lib.cli import main
from routing_lib.core.admin import ADMIN_EVENTS, admin_row
from routing_lib.core.tables import KV_CONFIG
from routing_lib.lookup import jsonbody
from routing_lib.lookup.processor import answer
from routing_lib.lookup.refresher import Served, SnapshotHolder
from routing_lib.read.warehouse import load_snapshot, table_versions
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import NAMESRV_VERSION, RequestCode, ResponseCode
from routing_lib.remoting.service_metrics import Metrics
from schemas.route_event import TickEvent
from tests.support.lookup_support import (
    KV_EVENTS,
    KV_FIXTURE,
    KV_TABLES,
    KV_WATERMARK,
    AppClient,
    RemotingClient,
    ServerThread,
    Warehouse,
    arrow_schema,
    kv_index,
    wait_until,
)

EXPECTED = json.loads((KV_FIXTURE / "expected.json").read_text())


def request(code: int, **ext: str) -> RemotingCommand:
    return RemotingCommand(code=code, version=NAMESRV_VERSION, opaque=5, ext_fields=ext)


def test_replay_has_the_kv_table_of_expected_json():
    # The fixture's state is what the index serves: guards the test data itself.
    assert kv_index().kv == EXPECTED["kvConfigTable"]
    assert EXPECTED["kvConfigTable"]["gone"] == {}  # an emptied namespace stays


def test_get_kv_config():
    index = kv_index()
    ok = answer(index, request(RequestCode.GET_KV_CONFIG, namespace="team", key="pager"))
    assert (ok.code, ok.ext_fields, ok.opaque) == (0, {"value": "+1-555-0100"}, 5)
    for ns, key in (("team", "owner"), ("gone", "k"), ("never", "k"), ("nope", "x")):
        missing = answer(index, request(RequestCode.GET_KV_CONFIG, namespace=ns, key=key))
        assert missing.code == ResponseCode.QUERY_NOT_FOUND == 22
        assert missing.remark == f"No config item, Namespace: {ns} Key: {key}"
        assert not missing.ext_fields
    assert (
        answer(index, request(RequestCode.GET_KV_CONFIG, namespace="team")).remark
        == "the custom field <key> is null"
    )


def test_get_kvlist_by_namespace():
    index = kv_index()
    team = answer(index, request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="team"))
    assert team.code == ResponseCode.SUCCESS and team.body == b'{"table":{"pager":"+1-555-0100"}}'
    # emptied: an empty KVTable
    gone = answer(index, request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="gone"))
    assert gone.code == ResponseCode.SUCCESS and json.loads(gone.body) == {"table": {}}
    for ns in ("never", "nope"):
        unknown = answer(index, request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace=ns))
        assert (
            unknown.code == ResponseCode.QUERY_NOT_FOUND
            and unknown.remark == f"No config item, Namespace: {ns}"
        )
    assert (
        answer(index, request(RequestCode.GET_KVLIST_BY_NAMESPACE)).code
        == ResponseCode.SYSTEM_ERROR
    )


def test_order_topic_conf_only_with_order_message_enable():
    off, on = kv_index(), kv_index(order=True)
    assert "orderTopicConf" not in off.route("Orders")
    assert on.route("Orders")["orderTopicConf"] == "broker-a:4"  # the latest PUT_KV
    assert "orderTopicConf" not in on.route("TBW102")  # no ORDER_TOPIC_CONFIG value
    # fastjson's field order: orderTopicConf between filterServerTable and queueDatas.
    assert list(on.route("Orders")) == [
        "brokerDatas",
        "filterServerTable",
        "orderTopicConf",
        "queueDatas",
    ]
    body = answer(on, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders")).body
    assert json.loads(body)["orderTopicConf"] == "broker-a:4"
    assert (
        b"orderTopicConf"
        not in answer(off, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders")).body
    )


def test_http_kv_in_process():
    holder = SnapshotHolder()
    client = AppClient(create_app_for(holder))
    assert client.get("/kv/team/pager").status_code == 503
    holder.current = Served.of(kv_index())
    got = client.get("/kv/team/pager")
    assert got.status_code == 200 and got.json()["data"] == {"value": "+1-555-0100"}
    assert got.json()["watermark"] == KV_WATERMARK
    missing = client.get("/kv/team/owner")
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "code": 22,
        "remark": "No config item, Namespace: team Key: owner",
    }
    assert client.get("/kv/team").json()["data"] == {"table": {"pager": "+1-555-0100"}}
    assert client.get("/kv/gone").json()["data"] == {"table": {}}
    assert client.get("/kv/never").json()["error"]["code"] == 22


def create_app_for(holder: SnapshotHolder):
    from routing_lib.lookup.server import create_app

    return create_app(holder, Metrics())


# -- real Delta tables --


def write_admin_events(root: Path) -> None:
    rows = [
        admin_row(e, ("16.jsonl", i), "2025-11-24")
        for i, e in enumerate(KV_EVENTS)
        if not isinstance(e, TickEvent)
        and e.eventType not in ("REGISTER", "HEARTBEAT", "UNREGISTER")
    ]
    write_deltalake(
        root / ADMIN_EVENTS, pa.Table.from_pylist(rows, schema=arrow_schema(ADMIN_EVENTS))
    )


def test_served_end_to_end(tmp_path):
    Warehouse(tmp_path).publish(0, KV_WATERMARK, KV_TABLES)
    assert load_snapshot(tmp_path).dump()["kvConfigTable"] == EXPECTED["kvConfigTable"]
    with ServerThread(tmp_path, order_message_enable=True) as server:
        service = server.service
        http = httpx.Client(base_url=f"http://127.0.0.1:{service.http_port}", timeout=5)
        wait_until(lambda: http.get("/readyz").status_code == 200)
        client = RemotingClient(service.port)
        assert client.call(
            RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="Orders"
        ).ext_fields == {"value": "broker-a:4"}
        assert (
            client.call(RequestCode.GET_KV_CONFIG, namespace="team", key="owner").code
            == ResponseCode.QUERY_NOT_FOUND
        )
        listed = client.call(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="team")
        assert jsonbody.parse_legacy(listed.body) == {"table": {"pager": "+1-555-0100"}}
        assert (
            client.call(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="never").code
            == ResponseCode.QUERY_NOT_FOUND
        )
        route = json.loads(client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders").body)
        assert route["orderTopicConf"] == "broker-a:4"
        assert http.get("/kv/ORDER_TOPIC_CONFIG/Orders").json()["data"]["value"] == "broker-a:4"
        assert http.get("/topics/Orders/route").json()["data"]["orderTopicConf"] == "broker-a:4"
        client.close()
        http.close()


def test_older_warehouse_without_kv_and_admin_tables(tmp_path, capsys):
    older = {t: rows for t, rows in KV_TABLES.items() if t != KV_CONFIG}
    Warehouse(tmp_path).publish(0, KV_WATERMARK, older)
    assert KV_CONFIG not in table_versions(tmp_path)
    snapshot = load_snapshot(tmp_path)
    assert snapshot.tables[KV_CONFIG] == [] and "kvConfigTable" not in snapshot.dump()
    with ServerThread(tmp_path, order_message_enable=True) as server:
        http = httpx.Client(base_url=f"http://127.0.0.1:{server.service.http_port}", timeout=5)
        wait_until(lambda: http.get("/readyz").status_code == 200)
        client = RemotingClient(server.service.port)
        assert (
            client.call(RequestCode.GET_KV_CONFIG, namespace="team", key="pager").code
            == ResponseCode.QUERY_NOT_FOUND
        )
        assert (
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders").code
            == ResponseCode.SUCCESS
        )
        # The KV table appears (a newer job): a new snapshot is served with it.
        Warehouse(tmp_path).publish(1, KV_WATERMARK, {KV_CONFIG: KV_TABLES[KV_CONFIG]})
        wait_until(
            lambda: (
                client.call(RequestCode.GET_KV_CONFIG, namespace="team", key="pager").code
                == ResponseCode.SUCCESS
            )
        )
        client.close()
        http.close()
    assert main(["history", "admin", "--warehouse", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_routectl_kv_and_history_admin(tmp_path, capsys):
    Warehouse(tmp_path).publish(0, KV_WATERMARK, KV_TABLES)
    write_admin_events(tmp_path)
    wh = ["--warehouse", str(tmp_path)]
    assert main(["kv", "get", "team", "pager", *wh]) == 0
    assert capsys.readouterr().out == "+1-555-0100\n"
    assert main(["kv", "get", "team", "owner", *wh]) == 1
    err = capsys.readouterr()
    assert err.out == "" and "No config item, Namespace: team Key: owner" in err.err
    assert main(["kv", "list", "gone", *wh]) == 0
    assert json.loads(capsys.readouterr().out) == {"table": {}}
    assert main(["kv", "list", "never", *wh]) == 1
    assert "QUERY_NOT_FOUND" in capsys.readouterr().err

    assert main(["history", "admin", *wh]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["event_type"] for r in rows] == [
        "PUT_KV",
        "PUT_KV",
        "PUT_KV",
        "DELETE_KV",
        "PUT_KV",
        "PUT_KV",
        "DELETE_KV",
        "DELETE_KV",
    ]
    assert [r["event_time"] for r in rows] == sorted(r["event_time"] for r in rows)
    assert rows[0]["requested_by"] == "10.0.5.5:40000"
    assert main(["history", "admin", "--from", "1764000002000", "--to", "1764000004000", *wh]) == 0
    window = json.loads(capsys.readouterr().out)
    assert [(r["event_time"], r["key"]) for r in window] == [
        (1764000002000, "owner"),
        (1764000003000, "pager"),
    ]


@pytest.mark.parametrize("bad", [["kv", "get", "team"], ["kv", "list", "team", "extra"]])
def test_routectl_kv_usage(tmp_path, bad, capsys):
    Warehouse(tmp_path).publish(0, KV_WATERMARK, KV_TABLES)
    assert main([*bad, "--warehouse", str(tmp_path)]) == 2
