"""The collector against the real local Kafka: broker requests become contract events,
published (acks=all) before the broker is answered; TICKs; refusals publish nothing; an
unreachable Kafka is an error answer, never a silent success."""

from __future__ import annotations

import json
import socket
import time

from routelake_dev import broker_requests
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import NAMESRV_VERSION, RequestCode, ResponseCode
from schemas import parse_event
from tests.support.rocketmq_support import (
    BrokerConnection,
    CollectorThread,
    call,
    events,
    records,
)

ADDR = "127.0.0.1:10911"
DV1 = {"stateVersion": 0, "timestamp": 1_700_000_000_000, "counter": 1}
DV2 = {**DV1, "counter": 2}
TOPICS = {"Orders": broker_requests.topic_config("Orders", 8)}
UNREQUESTED = ("TICK", "CHANNEL_CLOSED")  # events the collector publishes on its own


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_each_request_is_published_before_it_is_answered(kafka_bootstrap, topic):
    requests = [
        broker_requests.register_request(
            "C1", "broker-a", ADDR, topics=TOPICS, data_version=DV1, opaque=1
        ),
        broker_requests.register_request(
            "C1", "broker-b", "127.0.0.1:10921", compressed=True, topics=TOPICS, opaque=2
        ),
        broker_requests.identity_request(
            RequestCode.BROKER_HEARTBEAT, "C1", "broker-a", ADDR, opaque=3
        ),
        broker_requests.identity_request(
            RequestCode.QUERY_DATA_VERSION,
            "C1",
            "broker-a",
            ADDR,
            opaque=4,
            body=json.dumps(DV1).encode(),
        ),
        broker_requests.identity_request(
            RequestCode.UNREGISTER_BROKER, "C1", "broker-a", ADDR, opaque=5
        ),
    ]
    kinds = ["REGISTER", "REGISTER", "HEARTBEAT", "HEARTBEAT", "UNREGISTER"]
    with CollectorThread(kafka_bootstrap, topic) as collector:
        for n, (request, kind) in enumerate(zip(requests, kinds, strict=True), start=1):
            before = now_ms()
            response = call(collector.port, request)
            after = now_ms()
            assert (response.code, response.version) == (ResponseCode.SUCCESS, NAMESRV_VERSION)
            # Answered only once Kafka acknowledged: the event is readable right now.
            published = records(kafka_bootstrap, topic)
            # each call() closes its connection: CHANNEL_CLOSED follow (test_collector_channels)
            broker_events = [
                r for r in published if json.loads(r.value)["eventType"] not in UNREQUESTED
            ]
            assert len(broker_events) == n
            record = broker_events[-1]
            event = json.loads(record.value)
            assert event["eventType"] == kind and record.key == event["brokerName"].encode()
            assert before <= event["eventTime"] <= after  # the collector's receive clock
            parse_event(record.value)  # a valid contract event
    got = [e for e in events(kafka_bootstrap, topic) if e["eventType"] not in UNREQUESTED]
    assert got[0]["topicConfigTable"]["Orders"]["readQueueNums"] == 8
    assert got[0]["dataVersion"] == DV1 and got[1]["brokerName"] == "broker-b"


def test_ticks_are_published_every_interval(kafka_bootstrap, topic):
    with CollectorThread(
        kafka_bootstrap, topic, tick_interval_ms=200, collector_id="tap-1"
    ) as collector:
        time.sleep(1.5)
        counts = collector.collector.metrics.published
    ticks = [e for e in events(kafka_bootstrap, topic, ticks=True) if e["eventType"] == "TICK"]
    assert 5 <= len(ticks) <= 10 and counts["TICK"] >= 5
    assert all(t["source"] == "tap-1" for t in ticks)
    times = [t["eventTime"] for t in ticks]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert times == sorted(times) and min(gaps) >= 150
    for record in records(kafka_bootstrap, topic):
        parse_event(record.value)


def test_refused_requests_publish_nothing(kafka_bootstrap, topic):
    good = broker_requests.register_request("C1", "broker-a", ADDR, topics=TOPICS, opaque=1)
    bad_crc = RemotingCommand(
        **{
            **good.__dict__,
            "opaque": 2,
            "ext_fields": {
                **good.ext_fields,
                "bodyCrc32": str(int(good.ext_fields["bodyCrc32"]) ^ 1),
            },
        }
    )
    packed = broker_requests.register_request(
        "C1", "broker-a", ADDR, compressed=True, crc=False, topics=TOPICS, opaque=3
    )
    truncated = RemotingCommand(**{**packed.__dict__, "body": packed.body[:-8]})
    no_name = RemotingCommand(
        code=RequestCode.REGISTER_BROKER,
        opaque=4,
        ext_fields={k: v for k, v in good.ext_fields.items() if k != "brokerName"},
        body=good.body,
    )
    unknown = RemotingCommand(
        code=RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=5, ext_fields={"topic": "Orders"}
    )
    with CollectorThread(kafka_bootstrap, topic) as collector:
        answers = {
            r.opaque: call(collector.port, r) for r in (bad_crc, truncated, no_name, unknown)
        }
        refused = dict(collector.collector.metrics.refused)
    assert (answers[2].code, answers[2].remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert (
        answers[3].code == ResponseCode.SYSTEM_ERROR and "RegisterBrokerBody" in answers[3].remark
    )
    assert answers[4].code == ResponseCode.SYSTEM_ERROR and "<brokerName>" in answers[4].remark
    assert answers[5].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert refused == {"103": 3}
    assert events(kafka_bootstrap, topic) == []


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_kafka_is_an_error_answer():
    request = broker_requests.register_request("C1", "broker-a", ADDR, topics=TOPICS)
    with CollectorThread(
        f"127.0.0.1:{_closed_port()}", "nowhere", publish_timeout_ms=400
    ) as collector:
        started = time.monotonic()
        response = call(collector.port, request)
        took = time.monotonic() - started
        beat = call(
            collector.port,
            broker_requests.identity_request(
                RequestCode.BROKER_HEARTBEAT, "C1", "broker-a", ADDR, opaque=2
            ),
        )
        metrics = collector.collector.metrics
        assert metrics.publish_failures["REGISTER"] == 1 and not metrics.published
    assert response.code == ResponseCode.SYSTEM_ERROR and "not published" in response.remark
    assert beat.code == ResponseCode.SYSTEM_ERROR
    assert took < 10


def test_register_result_and_data_version_from_memory(kafka_bootstrap, topic):
    master = broker_requests.register_request(
        "C1", "broker-a", ADDR, 0, data_version=DV1, ha_server_addr="127.0.0.1:10912"
    )
    slave = broker_requests.register_request("C1", "broker-a", "127.0.0.1:10931", 1, opaque=2)

    def query(version: dict, opaque: int) -> RemotingCommand:
        return broker_requests.identity_request(
            RequestCode.QUERY_DATA_VERSION,
            "C1",
            "broker-a",
            ADDR,
            opaque=opaque,
            body=json.dumps(version).encode(),
        )

    with CollectorThread(kafka_bootstrap, topic) as collector:
        # held open, as a broker holds it: its close would remove the master
        connection = BrokerConnection(collector.port)
        before = connection.call(query(DV1, 1))  # unknown broker: changed
        assert connection.call(master).ext_fields == {}  # a master gets no result
        answer = call(collector.port, slave)
        same, newer = connection.call(query(DV1, 3)), connection.call(query(DV2, 4))
        connection.close()
    assert answer.ext_fields == {"masterAddr": ADDR, "haServerAddr": "127.0.0.1:10912"}
    assert before.ext_fields == {"changed": "true"} and before.body == b""
    assert same.ext_fields == {"changed": "false"} and json.loads(same.body) == DV1
    assert newer.ext_fields == {"changed": "true"}
