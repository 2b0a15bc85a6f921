"""`routectl collect`: the collector on its own remoting port (brokers list it next to their
NameServers: tap mode). `routectl serve --collect` puts it on the lookup's port instead."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

from fastapi import FastAPI, Response

from routing_lib.collector.admin_events import LOOPBACK_ONLY
from routing_lib.collector.publisher import KafkaPublisher
from routing_lib.collector.service import Collector
from routing_lib.lookup.refresher import Refresher, SnapshotHolder
from routing_lib.metrics_http import add_metrics_route
from routing_lib.remoting.limits import Limits
from routing_lib.remoting.service import LOOPBACK, NetworkService, serve_until_signal
from routing_lib.remoting.service_metrics import Metrics
from routing_lib.remoting.tls import PLAIN, ListenerTls

log = logging.getLogger("routelake.collector")


def default_collector_id(port: int) -> str:
    return f"{socket.gethostname()}:{port}"


def create_http_app(
    collector: Collector, metrics: Metrics, holder: SnapshotHolder | None
) -> FastAPI:
    """/healthz, /readyz (200 once the latest TICK was acknowledged by Kafka: a collector that
    cannot publish answers brokers SYSTEM_ERROR, so it should get no traffic) and /metrics."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    def status(code: int, body: bytes) -> Response:
        return Response(body, status_code=code, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> Response:
        return status(200, b'{"status":"ok"}')

    @app.get("/readyz")
    async def readyz() -> Response:
        if collector.kafka_ok:
            return status(200, b'{"ready":true}')
        return status(503, b'{"ready":false,"reason":"latest TICK not acknowledged by Kafka"}')

    if holder is not None:
        metrics.snapshot_source = holder.index_and_load_time
    add_metrics_route(app, metrics.registry)
    return app


class CollectorServer(NetworkService):
    """The collector's listener (same limits and codec as the lookup's) and its TICKs; with a
    warehouse, RegisterBrokerResult comes from the published snapshot (else from memory)."""

    def __init__(
        self,
        collector: Collector,
        limits: Limits,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        warehouse: str | Path | None = None,
        poll_interval_s: float = 1.0,
        http_port: int | None = None,
        tls: ListenerTls = PLAIN,
        http_tls: ListenerTls = PLAIN,
    ) -> None:
        """`http_port` (0 = ephemeral): also serve /healthz, /readyz, /metrics over HTTP;
        `tls`, `http_tls`: the TLS of the remoting and HTTP listeners (remoting/tls.py)."""
        self.collector = collector
        self.metrics = Metrics(prefix="routelake_collector")
        super().__init__(
            "collector",
            collector.handle,
            limits,
            self.metrics,
            log,
            host=host,
            port=port,
            http_port=http_port,
            tls=tls,
            http_tls=http_tls,
            known_codes=collector.codes,
            max_frame_bytes=limits.collector_max_frame_bytes,
            large_frame_codes=collector.large_frame_codes,
        )
        self.refresher: Refresher | None = None
        self.poll_interval_s = poll_interval_s
        holder = SnapshotHolder() if warehouse else None
        self.holder = holder
        if warehouse and holder is not None:
            self.refresher = Refresher(warehouse, holder, self.metrics)
        collector.attach(holder, self.metrics)

    async def start(self) -> None:
        await self.start_remoting()
        self.in_background(self.collector.run(self.stopping), "ticker")
        if self.http_port is not None:
            self.start_http(create_http_app(self.collector, self.metrics, self.holder))
        if self.refresher is not None:
            self.in_background(self.refresher.run(self.poll_interval_s, self.stopping), "refresher")
        log.info(
            "collector %s: remoting on %s:%d%s, publishing to %s; tls: remoting %s, http %s",
            self.collector.collector_id,
            self.host,
            self.port,
            f", http on {self.http_port}" if self.http_port is not None else "",
            getattr(self.collector.publisher, "topic", "?"),
            self.listener.tls.mode,
            self.http_tls.mode,
        )

    async def stop(self) -> None:
        await self.stop_serving(30, cancel_at_once=frozenset())
        await self.collector.close()


def collect(
    bootstrap: str,
    topic: str,
    port: int,
    limits: Limits,
    *,
    collector_id: str | None,
    tick_interval_ms: int,
    publish_timeout_ms: int,
    watermark_delay_ms: int | None = None,
    warehouse: str | None = None,
    host: str = LOOPBACK,
    admin_allow: list[str] | None = None,
    http_port: int | None = None,
    tls: ListenerTls = PLAIN,
    http_tls: ListenerTls = PLAIN,
) -> None:
    """Run the collector until Ctrl-C / SIGTERM (blocking)."""
    publisher = KafkaPublisher(bootstrap, topic, delivery_timeout_ms=publish_timeout_ms)
    collector = Collector(
        publisher,
        collector_id=collector_id or default_collector_id(port),
        tick_interval_ms=tick_interval_ms,
        watermark_delay_ms=watermark_delay_ms,
        admin_allow=LOOPBACK_ONLY if admin_allow is None else admin_allow,
    )
    asyncio.run(
        serve_until_signal(
            CollectorServer(
                collector,
                limits,
                host=host,
                port=port,
                warehouse=warehouse,
                http_port=http_port,
                tls=tls,
                http_tls=http_tls,
            )
        )
    )
