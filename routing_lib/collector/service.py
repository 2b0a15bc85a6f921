"""The collector: broker requests in, contract events to Kafka, NameServer answers out.

Each request gets its eventTime from the receive clock and is queued for Kafka at once, in
receive order; the broker is answered only after Kafka acknowledged the event (acks=all,
idempotent producer). When Kafka does not acknowledge in time, the broker gets SYSTEM_ERROR
and retries on its next registration period: an answered request is never lost. What the
NameServer would refuse (bad crc32, an undecodable body) is refused the same way, and
nothing is published. A TICK is published every `tick_interval_ms`, and one more when a
removal it published (CHANNEL_CLOSED, UNREGISTER) comes under the job's watermark
(`watermark_delay_ms` after its eventTime): the removal then reaches the tables without
waiting up to a tick interval for the TICK that moves the watermark past it.

Operators' requests (collector/admin_events.py: wipe/add write perm, delete topic, put/delete KV
config) are published the same way, as the contract's administrative events, with
`requestedBy` = the client address, once the client passed `admin_allow` (else NO_PERMISSION,
nothing published). WIPE/ADD answer wipeTopicCount/addTopicCount = how many topics the broker
group holds in the latest snapshot loaded (the lookup's, or `collect --warehouse`; 0 without
one): the change itself is applied later, by the job, so the count is not the job's.

Connections (collector/channels.py): every REGISTER and HEARTBEAT names the connection it
arrived on (`channel`); when a connection that carried one closes, fails or stays idle for
[serve] idle_timeout_s, one CHANNEL_CLOSED per broker address it carried is published, keyed by
brokerName, and retried until Kafka acknowledges it (nobody else would send it again). None for
the connections the collector closes because it is stopping; retries still waiting then are
dropped (those brokers leave on their heartbeat timeout instead).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any, Final, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from routing_lib.collector.admin_events import (
    COUNT_FIELD,
    LOOPBACK_ONLY,
    RefusedRequest,
    admin_event,
    allowed,
    event_key,
    no_namesrv_setting,
    parse_networks,
    peer_host,
    peer_text,
    single_topic_refusal,
)
from routing_lib.collector.broker_events import (
    BrokerRequestError,
    encode_event,
    identity,
    query_data_version,
    register_event,
    tick_event,
)
from routing_lib.collector.channels import BrokerChannels
from routing_lib.collector.publisher import PublishError
from routing_lib.collector.view import BrokerView, MemoryView, SnapshotView
from routing_lib.lookup.refresher import SnapshotHolder
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.limits import ThrottledLog, clip
from routing_lib.remoting.listener import ConnectionEnd, current_connection, current_peer
from routing_lib.remoting.protocol import (
    ADMIN_CODES,
    BROKER_CODES,
    NAMESRV_VERSION,
    RequestCode,
    ResponseCode,
)
from routing_lib.remoting.service_metrics import Metrics, label_values

log = logging.getLogger("routelake.collector")
# Kafka acknowledges in ms (acks=all on a healthy cluster); the request timeout is seconds.
PUBLISH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# A CHANNEL_CLOSED Kafka did not acknowledge is sent again after this, doubled each time up to
# the cap (a broker retries a failed registration on its next period, 30 s by default).
CLOSE_RETRY_FIRST_S = 1.0
CLOSE_RETRY_MAX_S = 30.0


class _Acked(enum.Enum):
    ACKED = enum.auto()


_ACKED: Final = _Acked.ACKED  # _not_acknowledged: Kafka acknowledged the event
Reply = RemotingCommand | None


class Publisher(Protocol):
    def send(self, key: bytes | None, value: bytes) -> asyncio.Future[None]: ...

    def close(self, timeout_s: float = 10.0) -> None: ...


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class CollectorMetrics:
    """The collector's own counters (its registry joins the service's /metrics)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        p, reg = "routelake_collector", self.registry
        self._published = Counter(
            f"{p}_published", "Events acknowledged by Kafka.", ["event"], registry=reg
        )
        self._publish_failures = Counter(
            f"{p}_publish_failures",
            "Events Kafka did not acknowledge (the broker got SYSTEM_ERROR).",
            ["event"],
            registry=reg,
        )
        self._publish_latency = Histogram(
            f"{p}_publish_duration_seconds",
            "Time from handing an event to the Kafka producer to its acknowledgement (or failure).",
            buckets=PUBLISH_BUCKETS,
            registry=reg,
        )
        self._refused = Counter(
            f"{p}_refused",
            "Broker requests refused (bad crc32, header, body); nothing published.",
            ["code"],
            registry=reg,
        )
        self._admin_denied = Counter(
            f"{p}_admin_denied",
            "Administrative requests from clients not in [collector] admin_allow "
            "(NO_PERMISSION); nothing published.",
            ["code"],
            registry=reg,
        )
        self._ticks_skipped = Counter(
            f"{p}_ticks_skipped",
            "TICKs skipped: the previous one was not acknowledged yet.",
            registry=reg,
        )
        self._connections_ended = Counter(
            f"{p}_broker_connections_ended",
            "Connections that carried a broker's REGISTER or HEARTBEAT and ended: closed by "
            "the broker, failed, or idle; each is published as one CHANNEL_CLOSED per broker "
            "address it carried (none for those the collector closed when stopping).",
            ["how"],
            registry=reg,
        )
        self.broker_connections = Gauge(
            f"{p}_broker_connections",
            "Open connections that carried a broker's REGISTER or HEARTBEAT.",
            registry=reg,
        )
        self.kafka_up = Gauge(
            f"{p}_kafka_up",
            "1 while Kafka acknowledges the collector's TICKs (its /readyz), 0 otherwise.",
            registry=reg,
        )

    def acknowledged(self, event: str, seconds: float) -> None:
        self._published.labels(event).inc()
        self._publish_latency.observe(seconds)

    def not_acknowledged(self, event: str, seconds: float) -> None:
        self._publish_failures.labels(event).inc()
        self._publish_latency.observe(seconds)

    def refuse(self, code: int) -> None:
        self._refused.labels(str(code)).inc()

    def deny(self, code: int) -> None:
        self._admin_denied.labels(str(code)).inc()

    def tick_skipped(self) -> None:
        self._ticks_skipped.inc()

    def connection_ended(self, how: ConnectionEnd) -> None:
        self._connections_ended.labels(how.value).inc()

    # -- reading back (tests, the closing log line) --

    @property
    def published(self) -> dict[str, int]:
        return self._counts("routelake_collector_published_total", "event")

    @property
    def publish_failures(self) -> dict[str, int]:
        return self._counts("routelake_collector_publish_failures_total", "event")

    @property
    def broker_connections_ended(self) -> dict[str, int]:
        return self._counts("routelake_collector_broker_connections_ended_total", "how")

    @property
    def refused(self) -> dict[str, int]:
        return self._counts("routelake_collector_refused_total", "code")

    @property
    def admin_denied(self) -> dict[str, int]:
        return self._counts("routelake_collector_admin_denied_total", "code")

    def _counts(self, sample: str, label: str) -> dict[str, int]:
        return {k: int(v) for k, v in label_values(self.registry, sample, label).items()}

    def exposition(self) -> str:
        return generate_latest(self.registry).decode()


class Collector:
    codes = BROKER_CODES | ADMIN_CODES
    # A PUT_KV_CONFIG value may be 64 Ki characters: more than a client request frame.
    large_frame_codes = frozenset({RequestCode.REGISTER_BROKER, RequestCode.PUT_KV_CONFIG})

    def __init__(
        self,
        publisher: Publisher,
        *,
        collector_id: str,
        tick_interval_ms: int = 1000,
        watermark_delay_ms: int | None = None,
        view: BrokerView | None = None,
        memory: MemoryView | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        admin_allow: Iterable[str] = LOOPBACK_ONLY,
    ) -> None:
        self.publisher = publisher
        self.collector_id = collector_id
        self.tick_interval_ms = tick_interval_ms
        # the job's [routes] watermark_delay_ms: when a removal is due (None: no due TICKs)
        self.watermark_delay_ms = watermark_delay_ms
        self.memory = memory or MemoryView()
        self.view: BrokerView = view or self.memory
        self.clock = clock
        self.metrics = CollectorMetrics()
        self._log = ThrottledLog(log)
        self._tick: asyncio.Future[None] | None = None
        self.kafka_ok = False  # the latest TICK was acknowledged (the collector's /readyz)
        self.admin_allow = parse_networks(admin_allow)
        self.holder: SnapshotHolder | None = None
        # this incarnation: its start time names its connections (a restart retires them)
        self.channels = BrokerChannels(collector_id, clock(), clock, self._connection_closed)
        self.metrics.broker_connections.set_function(lambda: self.channels.open_connections)
        self._closing: set[asyncio.Task[None]] = set()  # CHANNEL_CLOSED events being published

    # -- broker requests --

    def handle(self, request: RemotingCommand) -> Reply | Awaitable[Reply]:
        if request.is_response:
            return None  # nothing of ours is awaiting an answer from a broker
        if request.code in ADMIN_CODES:
            return self._admin(request, current_peer.get())
        if request.code == RequestCode.REGISTER_TOPIC_IN_NAMESRV:
            return self._refuse(request, single_topic_refusal(request))
        if request.code not in BROKER_CODES:  # the standalone collector answers nothing else
            return (
                None
                if request.is_oneway
                else _reply(
                    request,
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {request.code} not supported",
                )
            )
        now = self.clock()
        try:
            if request.code == RequestCode.REGISTER_BROKER:
                event = register_event(request, now)[1]
            else:
                kind = (
                    "UNREGISTER" if request.code == RequestCode.UNREGISTER_BROKER else "HEARTBEAT"
                )
                event = identity(request).event(kind, now)
            version = (
                query_data_version(request)
                if request.code == RequestCode.QUERY_DATA_VERSION
                else None
            )
        except BrokerRequestError as exc:
            return self._refuse(request, exc)
        # Remembered before Kafka answers: a record not acknowledged in time may still land.
        self.channels.stamp(current_connection.get(), event)
        sent = time.perf_counter()
        ack = self.publisher.send(event["brokerName"].encode(), encode_event(event))
        return self._after_ack(ack, sent, request, event, version)

    async def _after_ack(
        self,
        ack: asyncio.Future[None],
        sent: float,
        request: RemotingCommand,
        event: dict[str, Any],
        version: dict[str, Any] | None,
    ) -> Reply:
        failed = await self._not_acknowledged(
            ack, sent, request, event["eventType"], event["brokerAddr"]
        )
        if failed is not _ACKED:
            return failed
        cluster, addr, now = event["clusterName"], event["brokerAddr"], event["eventTime"]
        if event["eventType"] == "UNREGISTER":
            self.tick_when_due(now)
        known = self.memory.data_version(cluster, addr, now) if version is not None else None
        self.memory.apply(event)
        if request.is_oneway:
            return None
        if request.code == RequestCode.REGISTER_BROKER:
            return _reply(
                request,
                ResponseCode.SUCCESS,
                ext=self.view.register_result(cluster, event["brokerName"], event["brokerId"], now),
            )
        if version is not None:  # QUERY_DATA_VERSION: "changed" unless we know it equal
            changed = known != version
            return _reply(
                request,
                ResponseCode.SUCCESS,
                ext={"changed": str(changed).lower()},
                body=encode_event(known) if known is not None else b"",
            )
        return _reply(request, ResponseCode.SUCCESS)

    def _refuse(self, request: RemotingCommand, exc: BrokerRequestError) -> Reply:
        self.metrics.refuse(request.code)
        self._log.log(
            ("refused", request.code),
            logging.WARNING,
            "collector: refused request code %s: %s",
            request.code,
            exc,
        )
        code = exc.code if isinstance(exc, RefusedRequest) else ResponseCode.SYSTEM_ERROR
        return None if request.is_oneway else _reply(request, code, str(exc))

    async def _not_acknowledged(
        self,
        ack: asyncio.Future[None],
        sent: float,
        request: RemotingCommand,
        kind: str,
        who: object,
    ) -> Reply | Literal[_Acked.ACKED]:
        """Wait for Kafka: _ACKED (and counted), or the error reply to send instead."""
        try:
            await ack
        except PublishError as exc:
            self.metrics.not_acknowledged(kind, time.perf_counter() - sent)
            self._log.log(
                ("publish", kind),
                logging.WARNING,
                "collector: %s of %s not acknowledged by Kafka: %s",
                kind,
                who,
                exc,
            )
            return (
                None
                if request.is_oneway
                else _reply(
                    request, ResponseCode.SYSTEM_ERROR, f"routelake: event not published: {exc}"
                )
            )
        self.metrics.acknowledged(kind, time.perf_counter() - sent)
        return _ACKED

    # -- connections --

    def _connection_closed(self, events: list[dict[str, Any]], how: ConnectionEnd) -> None:
        self.metrics.connection_ended(how)
        for event in events:
            log.info(
                "collector: connection %s of broker %s (%s) ended (%s): publishing CHANNEL_CLOSED",
                event["channel"],
                event["brokerAddr"],
                event["brokerName"],
                how.value,
            )
            task = asyncio.ensure_future(self._publish_closed(event))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _publish_closed(self, event: dict[str, Any]) -> None:
        """Until Kafka acknowledges it: a broker would send its request again, this has no
        sender but us. Its eventTime stays the close's."""
        key, value = event["brokerName"].encode(), encode_event(event)
        backoff = CLOSE_RETRY_FIRST_S
        while True:
            sent = time.perf_counter()
            try:
                await self.publisher.send(key, value)
            except PublishError as exc:
                self.metrics.not_acknowledged(event["eventType"], time.perf_counter() - sent)
                self._log.log(
                    ("publish", event["eventType"]),
                    logging.WARNING,
                    "collector: CHANNEL_CLOSED of %s not acknowledged by Kafka (again in %g s): %s",
                    event["brokerAddr"],
                    backoff,
                    exc,
                )
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, CLOSE_RETRY_MAX_S)
                continue
            self.metrics.acknowledged(event["eventType"], time.perf_counter() - sent)
            self.memory.apply(event)  # its last connection: the broker is gone (slaves' masters)
            self.tick_when_due(event["eventTime"])
            return

    # -- operators' requests --

    def _admin(self, request: RemotingCommand, peer: object) -> Reply | Awaitable[Reply]:
        host = peer_host(peer)
        if not allowed(host, self.admin_allow):
            self.metrics.deny(request.code)
            self._log.log(
                "admin_denied",
                logging.WARNING,
                "collector: refused administrative request code %s from %s: not in "
                "[collector] admin_allow",
                request.code,
                peer,
            )
            return (
                None
                if request.is_oneway
                else _reply(
                    request,
                    ResponseCode.NO_PERMISSION,
                    f"routelake: {clip(str(host))} may not send administrative requests "
                    "([collector] admin_allow)",
                )
            )
        if no_namesrv_setting(request):
            return None if request.is_oneway else _reply(request, ResponseCode.SUCCESS)
        try:
            event = admin_event(request, self.clock(), peer_text(peer))
        except BrokerRequestError as exc:
            return self._refuse(request, exc)
        ext = None
        if request.code in COUNT_FIELD:  # counted now: the snapshot before this change
            ext = {COUNT_FIELD[request.code]: str(self.topic_count(event["brokerName"]))}
        sent = time.perf_counter()
        ack = self.publisher.send(event_key(event), encode_event(event))
        return self._after_admin_ack(ack, sent, request, event, ext)

    def topic_count(self, broker_name: str) -> int:
        """Topics with queues of `broker_name` in the latest loaded snapshot (0: none)."""
        served = self.holder.current if self.holder is not None else None
        return served.index.broker_topic_counts.get(broker_name, 0) if served else 0

    async def _after_admin_ack(
        self,
        ack: asyncio.Future[None],
        sent: float,
        request: RemotingCommand,
        event: dict[str, Any],
        ext: dict[str, str] | None,
    ) -> Reply:
        kind = event["eventType"]
        failed = await self._not_acknowledged(ack, sent, request, kind, event.get("requestedBy"))
        if failed is not _ACKED:
            return failed
        log.info(
            "collector: %s published, client %s: %s",
            kind,
            event.get("requestedBy"),
            {k: v for k, v in event.items() if k not in ("eventType", "value")},
        )
        return None if request.is_oneway else _reply(request, ResponseCode.SUCCESS, ext=ext)

    def attach(self, holder: SnapshotHolder | None, metrics: Metrics) -> None:
        """Answer RegisterBrokerResult from `holder`'s snapshot (if any); count in `metrics`."""
        if holder is not None:
            self.view = SnapshotView(holder, self.memory)
            self.holder = holder
        metrics.register(self.metrics.registry.collect)

    # -- clock ticks --

    async def run(self, stop: asyncio.Event) -> None:
        """Publish a TICK every tick_interval_ms until `stop` is set."""
        interval = self.tick_interval_ms / 1000
        while not stop.is_set():
            self.tick()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass

    def tick_when_due(self, event_time: int) -> None:
        """Publish a TICK as soon as the clock reads `event_time` + watermark_delay_ms: the
        first TICK that moves the job's watermark to `event_time`. While a TICK is still
        unacknowledged (a slow Kafka), it is sent once that one is answered instead of being
        skipped like a regular TICK: the one in flight is older than due."""
        if self.watermark_delay_ms is None:
            return
        due = event_time + self.watermark_delay_ms
        loop = asyncio.get_running_loop()

        def at_due() -> None:
            # the loop's timer runs on the monotonic clock, eventTime on the wall clock
            if (early_ms := due - self.clock()) > 0:
                loop.call_later(early_ms / 1000, at_due)
            elif self._tick is not None and not self._tick.done():
                self._tick.add_done_callback(lambda _: self.tick())
            else:
                self.tick()

        at_due()

    def tick(self) -> None:
        if self._tick is not None and not self._tick.done():
            self.metrics.tick_skipped()  # Kafka is slow or away: do not pile TICKs up
            return
        event = tick_event(self.clock(), self.collector_id)
        sent = time.perf_counter()
        self._tick = self.publisher.send(self.collector_id.encode(), encode_event(event))
        self._tick.add_done_callback(lambda future: self._ticked(future, sent))

    def _ticked(self, future: asyncio.Future[None], sent: float) -> None:
        if future.cancelled():
            return
        self.kafka_ok = future.exception() is None
        self.metrics.kafka_up.set(int(self.kafka_ok))
        if self.kafka_ok:
            self.metrics.acknowledged("TICK", time.perf_counter() - sent)
        else:
            self.metrics.not_acknowledged("TICK", time.perf_counter() - sent)

    async def close(self) -> None:
        for task in list(self._closing):  # handed to the producer: flushed below; waiting: dropped
            task.cancel()
        await asyncio.to_thread(self.publisher.close)
        log.info(
            "collector %s stopped: published %s, failures %s, refused %s",
            self.collector_id,
            dict(self.metrics.published),
            dict(self.metrics.publish_failures),
            dict(self.metrics.refused),
        )


def _reply(
    request: RemotingCommand,
    code: int,
    remark: str | None = None,
    *,
    ext: dict[str, str] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    response = request.response(code, remark, body, version=NAMESRV_VERSION)
    return replace(response, ext_fields=ext) if ext else response
