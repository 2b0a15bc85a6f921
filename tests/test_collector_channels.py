"""The collector's connections (contract §2, "Connections (channels)"): every REGISTER and
HEARTBEAT names the connection it arrived on; a connection that carried one and closes, fails
or stays idle gives one CHANNEL_CLOSED per broker address, retried until Kafka acknowledges it;
a collector that is stopping publishes none. Against the real local Kafka, except the retry
(a publisher that refuses the first sends) and the id checks; `serve --collect` (one listener
for clients and brokers) in test_collector_serve."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from routelake_dev import broker_requests
from routing_lib.collector import service
from routing_lib.collector.publisher import PublishError
from routing_lib.collector.server import CollectorServer
from routing_lib.collector.service import Collector
from routing_lib.remoting.frames import FrameDecoder, RemotingCommand, encode
from routing_lib.remoting.limits import Limits
from routing_lib.remoting.protocol import RequestCode, ResponseCode
from schemas import parse_event
from tests.support.rocketmq_support import BrokerConnection, CollectorThread, events, records

DV = {"stateVersion": 0, "timestamp": 1_700_000_000_000, "counter": 1}
A, B = "127.0.0.1:10911", "127.0.0.1:10921"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def register(name: str, addr: str, broker_id: int = 0, opaque: int = 1) -> RemotingCommand:
    return broker_requests.register_request(
        "C1", name, addr, broker_id, data_version=DV, opaque=opaque
    )


def heartbeat(name: str, addr: str, code: int = RequestCode.BROKER_HEARTBEAT) -> RemotingCommand:
    body = json.dumps(DV).encode() if code == RequestCode.QUERY_DATA_VERSION else b""
    return broker_requests.identity_request(code, "C1", name, addr, opaque=2, body=body)


class BrokerSocket(BrokerConnection):
    """A broker's connection whose every request must succeed."""

    def call(self, request: RemotingCommand) -> RemotingCommand:
        answer = super().call(request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return answer


def closes(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [e for e in events(bootstrap, topic) if e["eventType"] == "CHANNEL_CLOSED"]


def wait_for(predicate: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_requests_name_their_connection_and_a_close_is_one_event_per_broker(kafka_bootstrap, topic):
    before = now_ms()
    with CollectorThread(kafka_bootstrap, topic, collector_id="tap-1") as collector:
        first, second = BrokerSocket(collector.port), BrokerSocket(collector.port)
        first.call(register("broker-a", A))
        first.call(register("broker-b", B, opaque=3))  # two brokers on one connection
        first.call(heartbeat("broker-a", A))
        first.call(heartbeat("broker-a", A, RequestCode.QUERY_DATA_VERSION))
        second.call(heartbeat("broker-a", A))
        second.call(heartbeat("broker-a", A, RequestCode.UNREGISTER_BROKER))
        first.close()
        wait_for(lambda: len(closes(kafka_bootstrap, topic)) == 2)
        metrics = collector.collector.metrics
        assert metrics.broker_connections_ended == {"closed": 1}
        assert metrics.broker_connections.collect()[0].samples[0].value == 1  # the second
        second.close()
        wait_for(lambda: len(closes(kafka_bootstrap, topic)) == 3)
    published = records(kafka_bootstrap, topic)
    got = [json.loads(r.value) for r in published]
    kinds = [e["eventType"] for e in got if e["eventType"] != "TICK"]
    assert (
        kinds
        == ["REGISTER", "REGISTER", "HEARTBEAT", "HEARTBEAT", "HEARTBEAT", "UNREGISTER"]
        + ["CHANNEL_CLOSED"] * 3
    )
    channels = [e.get("channel") for e in got if e["eventType"] != "TICK"]
    name, number = channels[0].rsplit("#", 1)
    collector_id, incarnation = name.split("@")
    assert collector_id == "tap-1" and before <= int(incarnation) <= now_ms()
    one, two = f"{name}#{number}", f"{name}#{int(number) + 1}"  # numbered as accepted
    assert channels[:6] == [one, one, one, one, two, None]  # an UNREGISTER names none
    first_closes = closes(kafka_bootstrap, topic)[:2]
    requests = [e for e in got if e.get("channel") == one]
    assert {(e["brokerAddr"], e["brokerName"], e["brokerId"]) for e in first_closes} == {
        (A, "broker-a", 0),
        (B, "broker-b", 0),
    }
    assert all(e["channel"] == one and e["clusterName"] == "C1" for e in first_closes)
    assert all(e["eventTime"] >= max(r["eventTime"] for r in requests) for e in first_closes)
    keys = {json.loads(r.value)["brokerAddr"]: r.key for r in published[-3:]}
    assert keys == {A: b"broker-a", B: b"broker-b"}  # keyed like the broker's other events
    assert closes(kafka_bootstrap, topic)[2]["channel"] == two
    for record in published:
        parse_event(record.value)  # valid contract events


def test_idle_and_failed_connections_close_a_stopping_collector_publishes_none(
    kafka_bootstrap, topic
):
    limits = Limits(idle_timeout_s=0.6)
    with CollectorThread(kafka_bootstrap, topic, limits=limits) as collector:
        unregister_only = BrokerSocket(collector.port)  # carried no REGISTER or HEARTBEAT
        unregister_only.call(heartbeat("broker-x", A, RequestCode.UNREGISTER_BROKER))
        unregister_only.close()
        idle = BrokerSocket(collector.port)
        idle.call(register("broker-a", A))
        assert idle.closed_by_peer()  # RocketMQ's serverChannelMaxIdleTimeSeconds, here 0.6 s
        broken = BrokerSocket(collector.port)
        broken.call(heartbeat("broker-b", B))
        broken.sock.sendall(b"\xff\xff\xff\xff")  # a negative frame length
        assert broken.closed_by_peer()
        wait_for(lambda: len(closes(kafka_bootstrap, topic)) == 2)
        held = BrokerSocket(collector.port)  # open when the collector stops
        held.call(register("broker-c", "127.0.0.1:10931"))
        metrics = collector.collector.metrics
    assert held.closed_by_peer()
    got = closes(kafka_bootstrap, topic)
    assert [(e["brokerAddr"], e["brokerName"]) for e in got] == [
        (A, "broker-a"),
        (B, "broker-b"),
    ]
    assert metrics.broker_connections_ended == {"idle": 1, "failed": 1}


def test_a_slave_is_told_no_master_once_the_masters_last_connection_closed(kafka_bootstrap, topic):
    """The collector's own memory answers RegisterBrokerResult (a bare `collect`): as the Java
    NameServer's onChannelDestroy, the master is gone once every connection it used closed."""
    with CollectorThread(kafka_bootstrap, topic) as collector:
        first, second, slave = (BrokerSocket(collector.port) for _ in range(3))
        first.call(register("broker-a", A))
        second.call(heartbeat("broker-a", A))  # the master on two connections

        def masters_told(closes_expected: int) -> dict[str, str]:
            wait_for(lambda: len(closes(kafka_bootstrap, topic)) == closes_expected)
            time.sleep(0.2)  # Kafka's acknowledgement reaches the collector's memory
            return slave.call(register("broker-a", B, broker_id=1)).ext_fields

        assert masters_told(0).get("masterAddr") == A
        first.close()
        assert masters_told(1).get("masterAddr") == A  # still on its second connection
        second.close()
        assert "masterAddr" not in masters_told(2)


class _RefusingPublisher:
    """Refuses the first `refusals` CHANNEL_CLOSED records (Kafka away), acknowledges the rest."""

    def __init__(self, refusals: int, tick_ack_s: float = 0.0) -> None:
        self.refusals = refusals
        self.tick_ack_s = tick_ack_s  # how long a TICK waits for its acknowledgement
        self.sent: list[dict[str, Any]] = []

    def send(self, key: bytes | None, value: bytes) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        event = json.loads(value)
        self.sent.append(event)
        if event["eventType"] == "CHANNEL_CLOSED" and self.refusals > 0:
            self.refusals -= 1
            future.set_exception(PublishError("Kafka away"))
        elif event["eventType"] == "TICK" and self.tick_ack_s:
            loop.call_later(self.tick_ack_s, future.set_result, None)
        else:
            future.set_result(None)
        return future

    def close(self, timeout_s: float = 10.0) -> None:
        pass


def _run_collector_with(
    publisher: _RefusingPublisher,
    scenario: Callable[[int], Any],
    stop_after_s: float,
    watermark_delay_ms: int | None = None,
) -> Collector:
    collector = Collector(
        publisher,
        collector_id="retry-1",
        tick_interval_ms=3_600_000,
        watermark_delay_ms=watermark_delay_ms,
    )

    async def main() -> None:
        server = CollectorServer(collector, Limits())
        await server.start()
        try:
            await scenario(server.port)
            await asyncio.sleep(stop_after_s)
        finally:
            await server.stop()

    asyncio.run(main())
    return collector


async def _register_and_close(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode(register("broker-a", A)))
    assert FrameDecoder().feed(await reader.read(65536))[0].code == ResponseCode.SUCCESS
    writer.close()


def test_an_unacknowledged_close_is_sent_again_until_acknowledged(monkeypatch):
    monkeypatch.setattr(service, "CLOSE_RETRY_FIRST_S", 0.05)
    publisher = _RefusingPublisher(refusals=3)
    collector = _run_collector_with(publisher, _register_and_close, stop_after_s=1.0)
    sent = [e for e in publisher.sent if e["eventType"] == "CHANNEL_CLOSED"]
    assert len(sent) == 4 and all(e == sent[0] for e in sent)  # the same event, same eventTime
    assert collector.metrics.publish_failures == {"CHANNEL_CLOSED": 3}
    assert collector.metrics.published["CHANNEL_CLOSED"] == 1


def test_a_retry_still_waiting_when_the_collector_stops_is_dropped(monkeypatch):
    monkeypatch.setattr(service, "CLOSE_RETRY_FIRST_S", 30.0)
    publisher = _RefusingPublisher(refusals=1)
    began = time.monotonic()
    _run_collector_with(publisher, _register_and_close, stop_after_s=0.3)
    assert time.monotonic() - began < 10  # not held up by the 30 s back-off
    sent = [e["eventType"] for e in publisher.sent if e["eventType"] != "TICK"]
    assert sent == ["REGISTER", "CHANNEL_CLOSED"]


async def _register_and_unregister(port: int, close: bool = True) -> None:
    """broker-a registers and unregisters, then closes its connection (unless not `close`)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for request in (
        register("broker-a", A),
        heartbeat("broker-a", A, RequestCode.UNREGISTER_BROKER),
    ):
        writer.write(encode(request))
        assert FrameDecoder().feed(await reader.read(65536))[0].code == ResponseCode.SUCCESS
    if close:
        await asyncio.sleep(0.2)
        writer.close()


DUE_DELAY_MS = 400  # a watermark delay for the test; TICKs otherwise come once an hour
DUE_SLACK_MS = 1000  # how late the due TICK may be (a timer under xdist at load ~14); the
# regular TICK it stands in for is an hour away


def test_a_removal_gets_a_tick_once_it_is_under_the_watermark():
    """UNREGISTER and CHANNEL_CLOSED each get a TICK at eventTime + the watermark delay, not
    the next regular one (an hour away here): the removal is applied without waiting for it."""
    publisher = _RefusingPublisher(refusals=0)
    _run_collector_with(
        publisher, _register_and_unregister, stop_after_s=2.5, watermark_delay_ms=DUE_DELAY_MS
    )
    sent = [(e["eventType"], e["eventTime"]) for e in publisher.sent]
    [(_, unregistered)] = [e for e in sent if e[0] == "UNREGISTER"]
    [(_, closed)] = [e for e in sent if e[0] == "CHANNEL_CLOSED"]
    first_tick, *ticks = [t for kind, t in sent if kind == "TICK"]  # the first: at the start
    assert first_tick <= unregistered and len(ticks) == 2
    for removal, tick in zip((unregistered, closed), ticks, strict=True):
        assert removal + DUE_DELAY_MS <= tick <= removal + DUE_DELAY_MS + DUE_SLACK_MS


def test_a_due_tick_waits_for_a_slow_tick_in_flight_instead_of_being_skipped():
    """Kafka takes 700 ms to acknowledge each TICK: the one sent at the start is still in
    flight when the UNREGISTER's TICK is due; it is sent once that one is answered."""
    publisher = _RefusingPublisher(refusals=0, tick_ack_s=0.7)
    unregister = partial(_register_and_unregister, close=False)
    _run_collector_with(publisher, unregister, stop_after_s=2.5, watermark_delay_ms=100)
    [unregistered] = [e["eventTime"] for e in publisher.sent if e["eventType"] == "UNREGISTER"]
    first_tick, *ticks = [e["eventTime"] for e in publisher.sent if e["eventType"] == "TICK"]
    assert unregistered + 100 < first_tick + 700  # due while the first was in flight
    [due] = ticks
    assert first_tick + 700 <= due <= first_tick + 700 + DUE_SLACK_MS


def test_without_a_watermark_delay_there_are_no_due_ticks():
    publisher = _RefusingPublisher(refusals=0)
    _run_collector_with(publisher, _register_and_unregister, stop_after_s=0.8)
    assert [e["eventType"] for e in publisher.sent].count("TICK") == 1  # the one at the start


@pytest.mark.parametrize("collector_id", ["", "a@b", "has space", "x#1", "c" * 129])
def test_a_collector_id_that_cannot_name_a_channel_is_refused(collector_id):
    with pytest.raises(ValueError, match="cannot name a channel"):
        Collector(_RefusingPublisher(0), collector_id=collector_id)
