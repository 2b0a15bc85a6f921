"""`serve --collect`: lookup and collector on one remoting port, RegisterBrokerResult
from the served snapshot, REGISTER frames past the lookup's frame limit; /readyz and a metric
for a stale watermark."""

from __future__ import annotations

import time

import httpx

from routelake_dev import broker_requests
from routing_lib.collector.publisher import KafkaPublisher
from routing_lib.collector.service import Collector
from routing_lib.core.tables import BROKER_LIVE
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import NAMESRV_VERSION, RequestCode, ResponseCode
from tests.support.lookup_support import ServerThread, Warehouse, tables, wait_until
from tests.support.metrics_support import sample
from tests.support.rocketmq_support import call, events, exchange

OLD_WATERMARK = 1_764_000_050_000


def collector(bootstrap: str, topic: str) -> Collector:
    return Collector(
        KafkaPublisher(bootstrap, topic), collector_id="serve-test", tick_interval_ms=3_600_000
    )


def test_one_port_for_brokers_and_clients(tmp_path, kafka_bootstrap, topic):
    routes = tables()
    routes[BROKER_LIVE] = [
        {**row, "ha_server_addr": "10.0.0.1:10912"}
        if row["broker_addr"] == "10.0.0.1:10911"
        else row
        for row in routes[BROKER_LIVE]
    ]
    Warehouse(tmp_path).publish(0, OLD_WATERMARK, routes)
    many = {f"Topic{i}": broker_requests.topic_config(f"Topic{i}", 8) for i in range(800)}
    slave = broker_requests.register_request(
        "ClusterA", "broker-a", "10.0.0.2:10911", 1, topics=many, opaque=7
    )
    assert slave.frame_bytes == 0 and len(slave.body) > 65536  # past the lookup's limit
    with ServerThread(tmp_path, collector=collector(kafka_bootstrap, topic)) as server:
        port = server.service.port
        wait_until(lambda: server.service.holder.current is not None)
        registered = call(port, slave)
        route = call(
            port,
            RemotingCommand(
                code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                version=NAMESRV_VERSION,
                opaque=8,
                ext_fields={"topic": "Orders"},
            ),
        )
        big_query = RemotingCommand(
            code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
            opaque=9,
            ext_fields={"topic": "Orders"},
            body=b"x" * 70_000,
        )
        refused, closed = exchange(port, big_query, timeout=10)
        metrics = httpx.get(f"http://127.0.0.1:{server.service.http_port}/metrics").text
    # RouteInfoManager: a slave learns its live master's address and HA address.
    assert registered.code == ResponseCode.SUCCESS
    assert registered.ext_fields == {
        "masterAddr": "10.0.0.1:10911",
        "haServerAddr": "10.0.0.1:10912",
    }
    assert route.code == ResponseCode.SUCCESS and b"broker-a" in route.body
    assert refused == [] and closed
    # the broker's connection closed after its answer: one CHANNEL_CLOSED naming it
    [event, closed] = events(kafka_bootstrap, topic)
    assert event["brokerAddr"] == "10.0.0.2:10911" and len(event["topicConfigTable"]) == 800
    assert closed["eventType"] == "CHANNEL_CLOSED" and closed["brokerAddr"] == "10.0.0.2:10911"
    assert closed["channel"] == event["channel"] and event["channel"].startswith("serve-test@")
    assert sample(metrics, "routelake_collector_published_total", event="REGISTER") == 1
    assert (
        sample(
            metrics,
            "routelake_lookup_requests_total",
            protocol="remoting",
            request="103",
            code="0",
            result="ok",
        )
        == 1
    )


def _metric(text: str, name: str) -> float | None:
    return sample(text, name)


def test_readyz_fails_on_a_stale_watermark(tmp_path):
    warehouse = Warehouse(tmp_path)
    warehouse.publish(0, OLD_WATERMARK, tables())
    with ServerThread(tmp_path, max_watermark_age_s=60) as server:
        http = httpx.Client(base_url=f"http://127.0.0.1:{server.service.http_port}")
        wait_until(lambda: server.service.holder.current is not None)
        stale = http.get("/readyz")
        metrics = http.get("/metrics").text
        assert _metric(metrics, "routelake_lookup_watermark_stale") == 1
        assert _metric(metrics, "routelake_lookup_readyz_stale_total") == 1
        warehouse.publish(1, time.time_ns() // 1_000_000 - 15_000, tables(orders_queues=2))
        wait_until(lambda: http.get("/readyz").status_code == 200)
        fresh = http.get("/metrics").text
    assert stale.status_code == 503 and "bound 60" in stale.json()["error"]["remark"]
    assert _metric(fresh, "routelake_lookup_watermark_stale") == 0


def test_no_bound_by_default(tmp_path):
    Warehouse(tmp_path).publish(0, OLD_WATERMARK, tables())
    with ServerThread(tmp_path) as server:
        wait_until(lambda: server.service.holder.current is not None)
        ready = httpx.get(f"http://127.0.0.1:{server.service.http_port}/readyz")
        metrics = httpx.get(f"http://127.0.0.1:{server.service.http_port}/metrics").text
    assert ready.status_code == 200 and "watermark_stale" not in metrics
