"""Shared by the lookup/collector tests and bench/lookup_bench.py: hand-built and golden route
tables, a Delta warehouse written with delta-rs the way the pipeline commits (no Spark), the
lookup service on a thread, a blocking remoting client, an in-process HTTP client."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Literal

import httpx
import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY, spec
from routing_lib.core.replay import default_watermark, fleet_rows, replay
from routing_lib.core.tables import (
    BROKER_ADDR,
    BROKER_LIVE,
    CLUSTER_ADDR,
    FILTER_SERVER,
    PROGRESS,
    ROUTE_TABLES,
    TOPIC_QUEUE,
)
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.server import LookupService
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.warehouse import WarehouseSnapshot
from routing_lib.remoting.frames import FrameDecoder, RemotingCommand, SerializeType, encode
from routing_lib.remoting.protocol import NAMESRV_VERSION
from schemas import parse_event

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


# -- a hand-built snapshot --


def queue(topic, broker, n, perm=6, sys_flag=0):
    return {
        "topic": topic,
        "broker_name": broker,
        "read_queue_nums": n,
        "write_queue_nums": n,
        "perm": perm,
        "topic_sys_flag": sys_flag,
    }


def addr(name, bid, address, cluster, acting=False, zone=None):
    return {
        "broker_name": name,
        "broker_id": bid,
        "broker_addr": address,
        "cluster": cluster,
        "enable_acting_master": acting,
        "zone_name": zone,
    }


def live(cluster, address, name, last=1_764_000_000_000):
    return {
        "cluster_name": cluster,
        "broker_addr": address,
        "broker_name": name,
        "last_update_timestamp": last,
        "heartbeat_timeout_millis": 120_000,
        "ha_server_addr": None,
        "data_version": {"state_version": 0, "timestamp": 1, "counter": 2},
    }


def tables(orders_queues: int = 8, master_a: str = "10.0.0.1:10911") -> dict[str, list[dict]]:
    return {
        TOPIC_QUEUE: [
            queue("Orders", "broker-a", orders_queues),
            queue("Orders", "broker-b", 4),
            queue("Lonely", "broker-gone", 1),
            queue("Half", "broker-b", 2),
            queue("Half", "broker-gone", 2),
            queue("Acting", "broker-c", 4, perm=4),
            queue("ActingRW", "broker-c", 4, perm=6),
            queue("rmq_sys_SYNC_BROKER_MEMBER_broker-c", "broker-c", 1, perm=4),
            queue("TBW102", "broker-a", 8, perm=7),
        ],
        BROKER_ADDR: [
            addr("broker-a", 0, master_a, "ClusterA", zone="zone-1"),
            addr("broker-a", 1, "10.0.0.2:10911", "ClusterA", zone="zone-1"),
            addr("broker-b", 0, "10.0.1.1:10911", "ClusterA"),
            addr("broker-c", 2, "10.0.2.2:10911", "ClusterB", acting=True),
            addr("broker-c", 12, "10.0.2.12:10911", "ClusterB", acting=True),
            addr("broker-c", 1, "10.0.2.1:10911", "ClusterB", acting=True),
        ],
        CLUSTER_ADDR: [
            {"cluster_name": "ClusterA", "broker_name": "broker-a"},
            {"cluster_name": "ClusterA", "broker_name": "broker-b"},
            {"cluster_name": "ClusterB", "broker_name": "broker-c"},
        ],
        BROKER_LIVE: [
            live("ClusterB", "10.0.2.1:10911", "broker-c"),
            live("ClusterA", master_a, "broker-a"),
            live("ClusterA", "10.0.1.1:10911", "broker-b"),
        ],
        FILTER_SERVER: [
            {
                "cluster_name": "ClusterA",
                "broker_addr": master_a,
                "broker_name": "broker-a",
                "filter_server_list": ["10.0.0.1:30000"],
            }
        ],
    }


VERSIONS = {
    "topic_queue_table": 3,
    "broker_addr_table": 2,
    "cluster_addr_table": 1,
    "broker_live_table": 5,
    "filter_server_table": 1,
    "route_progress": 7,
}


def snapshot(**kw) -> WarehouseSnapshot:
    return WarehouseSnapshot(tables(**kw), dict(VERSIONS), 1_764_000_050_000)


# -- golden route tables --

RANDOM_FLEET = GOLDEN / "20_random_fleet_seed101"
PRIVATE_V4 = re.compile(r"\b10\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")


def to_loopback(value: Any) -> Any:
    """Every 10.a.b.c in a row (addresses, HA and filter servers) becomes 127.a.b.c."""
    if isinstance(value, str):
        return PRIVATE_V4.sub(r"127.\1.\2.\3", value)
    if isinstance(value, dict):
        return {k: to_loopback(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_loopback(v) for v in value]
    return value


def fixture_tables(fixture: Path = RANDOM_FLEET) -> tuple[dict[str, list[dict]], int]:
    """The route tables at the fixture's final watermark (pure replay), on loopback."""
    events = [parse_event(line) for line in (fixture / "events.jsonl").read_text().splitlines()]
    until = default_watermark(events, 10_000)
    rows = fleet_rows(replay(events, until).values())
    return {t: to_loopback(rows[t]) for t in ROUTE_TABLES}, until


# -- fixture 16 (KV config and admin events) through the reference replay --

KV_FIXTURE = GOLDEN / "16_kv_config_admin"
KV_LINES = (KV_FIXTURE / "events.jsonl").read_text().splitlines()
KV_EVENTS = [parse_event(line) for line in KV_LINES]
KV_WATERMARK = default_watermark(KV_EVENTS, 10_000)
KV_TABLES = fleet_rows(replay(KV_EVENTS, KV_WATERMARK).values())


def kv_index(order: bool = False) -> RouteIndex:
    return RouteIndex(WarehouseSnapshot(KV_TABLES, {}, KV_WATERMARK), order_message_enable=order)


# -- clients and servers --


class AppClient:
    """Calls the ASGI app in process (httpx's ASGI transport), one event loop per call."""

    def __init__(self, app) -> None:
        self.app = app

    def get(self, path: str) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as c:
                return await c.get(path)

        return asyncio.run(call())


# -- a warehouse written like the pipeline does, the service on a thread --

APP_ID = "test-writer"


def with_group_layout(route_tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The tables plus what the lookup reads topicQueueTable from (issue 36): topic_base
    holding topic_queue_table's rows, every group under a trivial overlay (no overlay row),
    which derives exactly those rows."""
    if TOPIC_QUEUE not in route_tables:
        return route_tables
    rows = route_tables[TOPIC_QUEUE]
    return {**route_tables, TOPIC_BASE: rows, TOPIC_OVERLAY: []}


class Warehouse:
    """Writes like the pipeline does: route tables, then the progress row, each commit
    carrying txn(appId, batch id)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(
        self,
        table: str,
        rows: list[dict],
        batch: int,
        mode: Literal["overwrite", "append"] = "overwrite",
    ) -> None:
        data = pa.Table.from_pylist(rows, schema=arrow_schema(table))
        commit = CommitProperties(app_transactions=[Transaction(APP_ID, batch)])
        parts = list(spec(table).partition_by) or None
        if mode == "append":  # two calls: write_deltalake's overloads split on the mode
            write_deltalake(
                self.root / table, data, mode="append", partition_by=parts, commit_properties=commit
            )
        else:
            write_deltalake(
                self.root / table,
                data,
                mode="overwrite",
                partition_by=parts,
                commit_properties=commit,
            )

    def progress(self, batch: int, watermark: int) -> None:
        self.write(PROGRESS, [{"batch_id": batch, "watermark": watermark}], batch, mode="append")

    def publish(
        self, batch: int, watermark: int, route_tables: dict[str, list[dict]], pause_s: float = 0.0
    ) -> None:
        for table, rows in with_group_layout(route_tables).items():
            self.write(table, rows, batch)
            time.sleep(pause_s)  # a slow writer: the refresher polls in between
        self.progress(batch, watermark)


class ServerThread:
    def __init__(self, warehouse: Path, **options) -> None:
        self.options = dict(warehouse=warehouse, poll_interval_s=0.05, **options)
        self.started = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.service: LookupService
        self.error: BaseException | None = None

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        self.service = LookupService(**self.options)
        try:
            await self.service.start()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.started.set()
        try:
            await self.service.wait(self.stop_event)
        finally:
            await self.service.stop()

    def __enter__(self) -> ServerThread:
        self.thread.start()
        assert self.started.wait(10) and self.error is None
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(15)
        assert not self.thread.is_alive()


class RemotingClient:
    """One request at a time on one connection; the answer must be the next frame."""

    def __init__(self, port: int, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []
        self.opaque = 0

    def call(
        self, code: int, kind: SerializeType = SerializeType.JSON, body: bytes = b"", **ext: str
    ) -> RemotingCommand:
        self.opaque += 1
        self.sock.sendall(
            encode(
                RemotingCommand(
                    code=code,
                    version=NAMESRV_VERSION,
                    opaque=self.opaque,
                    ext_fields=ext,
                    body=body,
                    serialize_type=kind,
                )
            )
        )
        while not self.pending:
            data = self.sock.recv(65536)
            assert data, "connection closed"
            self.pending += self.decoder.feed(data)
        response = self.pending.pop(0)
        assert response.opaque == self.opaque and response.is_response
        return response

    def close(self) -> None:
        self.sock.close()


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
