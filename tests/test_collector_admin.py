"""Operators' requests at the collector against the real local Kafka: each is published
as the contract's administrative event before it is answered; wipe/add answer the topic count
of the served snapshot; clients outside [collector] admin_allow get NO_PERMISSION (16) and
nothing is published."""

from __future__ import annotations

import json
import socket
import time

import pytest

from routing_lib.collector.admin_events import allowed, parse_networks, peer_text
from routing_lib.lookup.refresher import Served, SnapshotHolder
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import NAMESRV_VERSION, RequestCode, ResponseCode
from schemas import parse_event
from tests.support.lookup_support import kv_index
from tests.support.metrics_support import sample
from tests.support.rocketmq_support import CollectorThread, call, events, records


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def admin(code: int, opaque: int, **ext: str) -> RemotingCommand:
    return RemotingCommand(code=code, version=NAMESRV_VERSION, opaque=opaque, ext_fields=ext)


REQUESTS = [
    (
        admin(RequestCode.WIPE_WRITE_PERM_OF_BROKER, 1, brokerName="broker-a"),
        "WIPE_WRITE_PERM",
        {"brokerName": "broker-a"},
        {"wipeTopicCount": "3"},
    ),
    (
        admin(RequestCode.ADD_WRITE_PERM_OF_BROKER, 2, brokerName="broker-a"),
        "ADD_WRITE_PERM",
        {"brokerName": "broker-a"},
        {"addTopicCount": "3"},
    ),
    (
        admin(RequestCode.ADD_WRITE_PERM_OF_BROKER, 3, brokerName="unknown"),
        "ADD_WRITE_PERM",
        {"brokerName": "unknown"},
        {"addTopicCount": "0"},
    ),
    (
        admin(RequestCode.DELETE_TOPIC_IN_NAMESRV, 4, topic="Orders"),
        "DELETE_TOPIC",
        {"topic": "Orders"},
        {},
    ),
    (
        admin(RequestCode.DELETE_TOPIC_IN_NAMESRV, 5, topic="Orders", clusterName="DefaultCluster"),
        "DELETE_TOPIC",
        {"topic": "Orders", "clusterName": "DefaultCluster"},
        {},
    ),
    (
        admin(
            RequestCode.PUT_KV_CONFIG,
            6,
            namespace="ORDER_TOPIC_CONFIG",
            key="Orders",
            value="broker-a:8",
        ),
        "PUT_KV",
        {"namespace": "ORDER_TOPIC_CONFIG", "key": "Orders", "value": "broker-a:8"},
        {},
    ),
    (
        admin(RequestCode.DELETE_KV_CONFIG, 7, namespace="team", key="owner"),
        "DELETE_KV",
        {"namespace": "team", "key": "owner"},
        {},
    ),
]


def test_each_admin_request_is_published_then_answered(kafka_bootstrap, topic):
    thread = CollectorThread(kafka_bootstrap, topic)
    holder = SnapshotHolder()
    holder.current = Served.of(kv_index())  # fixture 16: broker-a holds 3 topics
    thread.collector.holder = holder
    with thread as collector:
        for n, (request, kind, fields, ext) in enumerate(REQUESTS, start=1):
            before = now_ms()
            response = call(collector.port, request)
            after = now_ms()
            assert (response.code, response.version) == (ResponseCode.SUCCESS, NAMESRV_VERSION)
            assert dict(response.ext_fields or {}) == ext
            # Answered only after Kafka's ack: the event is readable now.
            published = [
                r
                for r in records(kafka_bootstrap, topic)
                if json.loads(r.value)["eventType"] != "TICK"
            ]
            assert len(published) == n
            event = json.loads(published[-1].value)
            assert {k: event[k] for k in fields} == fields and event["eventType"] == kind
            assert set(event) == {"eventType", "eventTime", "requestedBy", *fields}
            assert before <= event["eventTime"] <= after
            host, port = event["requestedBy"].rsplit(":", 1)
            assert host == "127.0.0.1" and int(port) > 0
            parsed = parse_event(published[-1].value)  # a valid contract event
            assert parsed.eventType == kind
        published_counts = dict(collector.collector.metrics.published)
    published_counts.pop("TICK", None)  # the first TICK, at start
    assert published_counts == {
        "WIPE_WRITE_PERM": 1,
        "ADD_WRITE_PERM": 2,
        "DELETE_TOPIC": 2,
        "PUT_KV": 1,
        "DELETE_KV": 1,
    }


def test_missing_fields_are_refused_and_not_published(kafka_bootstrap, topic):
    with CollectorThread(kafka_bootstrap, topic) as collector:
        no_broker = call(collector.port, admin(RequestCode.WIPE_WRITE_PERM_OF_BROKER, 1))
        no_key = call(
            collector.port, admin(RequestCode.PUT_KV_CONFIG, 2, namespace="ns", value="v")
        )
        no_value = call(
            collector.port, admin(RequestCode.PUT_KV_CONFIG, 3, namespace="ns", key="k")
        )
        no_topic = call(
            collector.port, admin(RequestCode.DELETE_TOPIC_IN_NAMESRV, 4, clusterName="C")
        )
        refused = dict(collector.collector.metrics.refused)
    assert (no_broker.code, no_broker.remark) == (1, "the custom field <brokerName> is null")
    assert (no_key.code, no_key.remark) == (1, "namespace or key is null")
    assert no_value.remark == "the custom field <value> is null"
    assert no_topic.remark == "the custom field <topic> is null"
    assert refused == {"205": 1, "100": 2, "216": 1}
    assert events(kafka_bootstrap, topic) == []


def test_client_outside_admin_allow_is_refused(kafka_bootstrap, topic):
    thread = CollectorThread(kafka_bootstrap, topic)
    thread.collector.admin_allow = parse_networks(["10.0.0.0/8", "::1/128"])  # not 127.0.0.1
    with thread as collector:
        answers = [call(collector.port, request) for request, *_ in REQUESTS]
        denied = dict(collector.collector.metrics.admin_denied)
        published = dict(collector.collector.metrics.published)
        published.pop("TICK", None)
        # Broker requests are not affected by the admin allow-list.
        metrics_text = collector.collector.metrics.exposition()
    assert all(a.code == ResponseCode.NO_PERMISSION == 16 for a in answers)
    assert "admin_allow" in answers[0].remark
    assert denied == {"205": 1, "327": 2, "216": 2, "100": 1, "102": 1}
    assert published == {}
    assert sample(metrics_text, "routelake_collector_admin_denied_total", code="327") == 2
    assert events(kafka_bootstrap, topic) == []


def test_default_allow_list_is_loopback(kafka_bootstrap, topic):
    with CollectorThread(kafka_bootstrap, topic) as collector:
        assert (
            call(
                collector.port, admin(RequestCode.DELETE_KV_CONFIG, 1, namespace="n", key="k")
            ).code
            == ResponseCode.SUCCESS
        )
    assert [e["eventType"] for e in events(kafka_bootstrap, topic)] == ["DELETE_KV"]


def test_unreachable_kafka_is_an_error_answer():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with CollectorThread(f"127.0.0.1:{port}", "nowhere", publish_timeout_ms=400) as collector:
        response = call(
            collector.port, admin(RequestCode.PUT_KV_CONFIG, 1, namespace="n", key="k", value="v")
        )
        failures = dict(collector.collector.metrics.publish_failures)
    assert response.code == ResponseCode.SYSTEM_ERROR and "not published" in response.remark
    assert failures["PUT_KV"] == 1


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.1.2.3", False),
        ("::2", False),
        ("fe80::1%eth0", False),
        (None, False),
        ("not-an-ip", False),
    ],
)
def test_allowed_default_networks(host, ok):
    assert allowed(host, parse_networks(["127.0.0.0/8", "::1/128"])) is ok


def test_allow_list_configured_and_invalid():
    networks = parse_networks(["10.0.0.0/8", "192.168.1.7"])
    assert allowed("10.200.0.1", networks) and allowed("192.168.1.7", networks)
    assert not allowed("127.0.0.1", networks) and not allowed("192.168.1.8", networks)
    with pytest.raises(ValueError, match="admin_allow"):
        parse_networks(["10.0.0.0/33"])
    assert peer_text(("::1", 4000, 0, 0)) == "::1:4000" and peer_text(None) is None
