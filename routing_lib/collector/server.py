"""`routectl collect`: the collector on its own remoting port (brokers list it next to their
NameServers: tap mode). `routectl serve --collect` puts it on the lookup's port instead."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

from routing_lib.collector.publisher import KafkaPublisher
from routing_lib.collector.service import Collector
from routing_lib.lookup.limits import Limits, Rejections
from routing_lib.lookup.listener import RemotingListener, serve_until_signal, until_stopped
from routing_lib.lookup.metrics import Metrics
from routing_lib.lookup.refresher import Refresher, SnapshotHolder

log = logging.getLogger("routelake.collector")
LOOPBACK = "127.0.0.1"


def default_collector_id(port: int) -> str:
    return f"{socket.gethostname()}:{port}"


class CollectorServer:
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
    ) -> None:
        self.collector = collector
        self.host = host
        self.port = port
        self.metrics = Metrics()
        self.listener = RemotingListener(
            "collector",
            collector.handle,
            limits,
            self.metrics,
            Rejections(self.metrics, log),
            log,
            known_codes=collector.codes,
            max_frame_bytes=limits.collector_max_frame_bytes,
            large_frame_codes=collector.large_frame_codes,
        )
        self.refresher: Refresher | None = None
        self.poll_interval_s = poll_interval_s
        holder = SnapshotHolder() if warehouse else None
        if warehouse:
            self.refresher = Refresher(warehouse, holder, self.metrics)
        collector.attach(holder, self.metrics)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        self.port = await self.listener.start(self.host, self.port)
        self._tasks = [asyncio.create_task(self.collector.run(self._stop), name="ticker")]
        if self.refresher is not None:
            self._tasks.append(
                asyncio.create_task(
                    self.refresher.run(self.poll_interval_s, self._stop), name="refresher"
                )
            )
        log.info(
            "collector %s: remoting on %s:%d, publishing to %s",
            self.collector.collector_id,
            self.host,
            self.port,
            getattr(self.collector.publisher, "topic", "?"),
        )

    async def wait(self, stop: asyncio.Event) -> None:
        await until_stopped(stop, self._tasks)

    async def stop(self) -> None:
        self._stop.set()
        self.listener.close()
        pending = [*self._tasks, *self.listener.connections]
        if pending:
            _, late = await asyncio.wait(pending, timeout=30)
            for task in late:
                task.cancel()
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
    warehouse: str | None = None,
    host: str = LOOPBACK,
    admin_allow: list[str] | None = None,
) -> None:
    """Run the collector until Ctrl-C / SIGTERM (blocking)."""
    publisher = KafkaPublisher(bootstrap, topic, delivery_timeout_ms=publish_timeout_ms)
    collector = Collector(
        publisher,
        collector_id=collector_id or default_collector_id(port),
        tick_interval_ms=tick_interval_ms,
        **({} if admin_allow is None else {"admin_allow": admin_allow}),
    )
    asyncio.run(
        serve_until_signal(
            CollectorServer(collector, limits, host=host, port=port, warehouse=warehouse)
        )
    )
