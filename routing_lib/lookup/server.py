"""The lookup service: RocketMQ remoting over asyncio TCP plus a FastAPI JSON API (uvicorn),
both answering from the one RouteIndex the refresher keeps current, on one event loop.

Every HTTP JSON body is an envelope `{"data"|"error": ..., "versions": {...}, "watermark": W}`
and carries the same two facts as headers (X-Routelake-Versions, X-Routelake-Watermark).
Both listeners enforce `Limits` (frame and header sizes, deadlines, connection counts); what
they refuse is counted per reason in /metrics and logged rate-limited (limits.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

try:
    import uvloop
except ImportError:  # optional: the service works on the default loop too
    uvloop = None  # type: ignore[assignment]  # the module or None, checked before use
from fastapi import FastAPI, Response
from prometheus_client.metrics_core import Metric

from routing_lib.config import load_config
from routing_lib.lookup import jsonbody
from routing_lib.lookup.allocator import fix_mmap_threshold
from routing_lib.lookup.processor import answer, no_kv_remark, no_route_remark
from routing_lib.lookup.refresher import Refresher, Served, SnapshotHolder
from routing_lib.lookup.route_risk import RouteRisks
from routing_lib.lookup.routes import Body, RouteIndex
from routing_lib.lookup.shared_index import DIR_ENV, SharedIndexes
from routing_lib.lookup.topics import validate_topic
from routing_lib.lookup.workers import WORKERS_TASK, serve_workers
from routing_lib.metrics_http import add_metrics_route
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.limits import Limits, clip
from routing_lib.remoting.listener import Reply
from routing_lib.remoting.protocol import READ_CODES, ResponseCode
from routing_lib.remoting.service import LOOPBACK, NetworkService, serve_until_signal
from routing_lib.remoting.service_metrics import Metrics
from routing_lib.remoting.tls import PLAIN, ListenerTls

if TYPE_CHECKING:
    from routing_lib.console.snapshot import Console

log = logging.getLogger("routelake.lookup")
JOIN_POLL_S = 0.05  # how often a worker process that has no snapshot yet looks for one


Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# -- HTTP --


def _envelope(served: Served | None, status: int, key: str, payload: bytes) -> Response:
    if served is None:
        body = b'{"' + key.encode() + b'":' + payload + b',"versions":null,"watermark":null}'
        headers = {"X-Routelake-Watermark": "none", "X-Routelake-Versions": ""}
    else:
        body = b'{"' + key.encode() + b'":' + payload + served.envelope_tail
        headers = served.headers
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _error(served: Served | None, status: int, code: int, remark: str) -> Response:
    return _envelope(served, status, "error", jsonbody.standard({"code": code, "remark": remark}))


def _not_ready() -> Response:
    # The refresh error names local paths: it goes to the log (refresher), not to clients.
    return _error(None, 503, ResponseCode.SYSTEM_ERROR, "no snapshot loaded yet")


class _ObserveHttp:
    """Pure ASGI middleware: request count by route template and status, and latency."""

    def __init__(self, app: Callable[..., Awaitable[None]], metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            route = scope.get("route")  # set by the router; absent for unknown paths
            self.metrics.observe(
                "http",
                getattr(route, "path", "unmatched"),
                str(status),
                time.perf_counter() - started,
            )


def create_app(
    holder: SnapshotHolder,
    metrics: Metrics,
    warehouse: str | Path | None = None,
    route_risks: RouteRisks | None = None,
) -> FastAPI:
    """The JSON API; with `warehouse`, also the console page (`/`, /console/...), whose health
    view lists `route_risks`' topics (the ones the route gauges count)."""
    app = FastAPI(
        title="routelake lookup", docs_url=None, redoc_url=None, openapi_url="/openapi.json"
    )
    app.add_middleware(_ObserveHttp, metrics=metrics)
    # Handlers are `async def`: they run on the event loop, never in a thread, and read
    # holder.current exactly once. Registration order is matching order.
    _add_route_api(app, holder)
    _add_kv_api(app, holder)
    _add_health_api(app, holder, metrics)
    if warehouse is not None:
        from routing_lib.console.app import add_console

        app.state.console = add_console(app, holder, warehouse, route_risks or RouteRisks())
    return app


def _add_route_api(app: FastAPI, holder: SnapshotHolder) -> None:
    """Topic routes, topic lists, cluster info, live brokers."""

    @app.get("/topics/{topic}/route")
    async def topic_route(topic: str) -> Response:
        served = holder.current
        if served is None:
            return _not_ready()
        invalid = validate_topic(topic)
        if invalid is not None:
            return _error(served, 400, ResponseCode.INVALID_PARAMETER, invalid)
        body = served.index.route_body(topic)
        if body is None:
            return _error(served, 404, ResponseCode.TOPIC_NOT_EXIST, no_route_remark(topic))
        return _envelope(served, 200, "data", body.standard)

    for path, body_of in (
        ("/topics", lambda index: index.topic_list_body),
        ("/topics/system", lambda index: index.system_topics_body),
        ("/clusters", lambda index: index.cluster_info_body),
        ("/brokers/live", lambda index: index.live_brokers_body),
    ):
        _serve_body(app, holder, path, body_of)

    @app.get("/clusters/{cluster}/topics")
    async def cluster_topics(cluster: str) -> Response:
        served = holder.current
        if served is None:
            return _not_ready()
        if cluster not in served.index.cluster_topics:
            return _error(served, 404, ResponseCode.SYSTEM_ERROR, f"no cluster {clip(cluster)}")
        return _envelope(served, 200, "data", served.index.topics_by_cluster_body(cluster).standard)


def _serve_body(
    app: FastAPI, holder: SnapshotHolder, path: str, body_of: Callable[[RouteIndex], Body]
) -> None:
    """A GET answered with one of the index's pre-encoded bodies."""

    async def handler() -> Response:
        served = holder.current
        if served is None:
            return _not_ready()
        return _envelope(served, 200, "data", body_of(served.index).standard)

    app.add_api_route(path, handler, methods=["GET"], name=path)


def _add_kv_api(app: FastAPI, holder: SnapshotHolder) -> None:
    """The KV config (namespace, key) -> value."""

    @app.get("/kv/{namespace}/{key}")
    async def kv_value(namespace: str, key: str) -> Response:
        """GET_KV_CONFIG: {"value": ...}; 404 with QUERY_NOT_FOUND (22) when missing."""
        served = holder.current
        if served is None:
            return _not_ready()
        value = served.index.kv_value(namespace, key)
        if value is None:
            return _error(
                served, 404, ResponseCode.QUERY_NOT_FOUND, no_kv_remark(clip(namespace), clip(key))
            )
        return _envelope(served, 200, "data", jsonbody.standard({"value": value}))

    @app.get("/kv/{namespace}")
    async def kv_list(namespace: str) -> Response:
        """GET_KVLIST_BY_NAMESPACE: the KVTable {"table": {...}}; 404 (22) when unknown."""
        served = holder.current
        if served is None:
            return _not_ready()
        body = served.index.kv_list_body(namespace)
        if body is None:
            return _error(served, 404, ResponseCode.QUERY_NOT_FOUND, no_kv_remark(clip(namespace)))
        return _envelope(served, 200, "data", body.standard)


def _add_health_api(app: FastAPI, holder: SnapshotHolder, metrics: Metrics) -> None:
    """Liveness, readiness (a fresh enough watermark) and Prometheus metrics."""

    @app.get("/healthz")
    async def healthz() -> Response:
        return _envelope(holder.current, 200, "data", b'{"status":"ok"}')

    @app.get("/readyz")
    async def readyz() -> Response:
        served = holder.current
        if served is None:
            return _not_ready()
        loading = metrics.workers_loading()
        if loading:  # some remoting worker processes would still answer "not ready"
            return _error(
                served, 503, ResponseCode.SYSTEM_ERROR, f"{loading} worker process(es) loading"
            )
        age = metrics.stale_watermark_age(served.index.watermark)
        if age is not None:  # the job (or its input) stopped: routes are older than allowed
            metrics.readyz_stale()
            return _error(
                served,
                503,
                ResponseCode.SYSTEM_ERROR,
                f"watermark is {age:.0f}s old (bound {metrics.max_watermark_age_s}s)",
            )
        return _envelope(served, 200, "data", b'{"ready":true}')

    metrics.snapshot_source = holder.index_and_load_time
    add_metrics_route(app, metrics.registry)


# -- the service --


def console_url(host: str, port: int, tls: bool) -> str:
    """Where a browser finds the console (`/`): a wildcard address is this machine's name."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    return f"{'https' if tls else 'http'}://{host}:{port}/"


class BrokerRequests(Protocol):
    """The collector half of `serve --collect` (routing_lib.collector.service.Collector)."""

    # read-only, so a collector's frozenset[RequestCode] qualifies (RequestCode is an int)
    @property
    def codes(self) -> frozenset[int]: ...

    @property
    def large_frame_codes(self) -> frozenset[int]: ...

    def handle(self, request: RemotingCommand) -> Reply | Awaitable[Reply]: ...

    async def run(self, stop: asyncio.Event) -> None: ...

    async def close(self) -> None: ...

    def attach(self, holder: SnapshotHolder | None, metrics: Metrics) -> None: ...


class LookupService(NetworkService):
    """Both listeners plus the refresher on the running event loop. Port 0 = ephemeral.
    With a `collector`, the remoting port also takes the brokers' requests (serve --collect)."""

    def __init__(
        self,
        warehouse: str | Path,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        http_port: int = 0,
        poll_interval_s: float = 1.0,
        support_acting_master: bool = False,
        limits: Limits | None = None,
        max_frame_bytes: int | None = None,
        idle_timeout_s: float | None = None,
        collector: BrokerRequests | None = None,
        max_watermark_age_s: float = 0.0,
        order_message_enable: bool = False,
        tls: ListenerTls = PLAIN,
        http_tls: ListenerTls = PLAIN,
        remoting_socket: socket.socket | None = None,
        http: bool = True,
    ) -> None:
        """`max_frame_bytes` and `idle_timeout_s`, if given, override those of `limits`;
        `max_watermark_age_s` > 0: /readyz fails when the watermark is older than that;
        `tls` and `http_tls`: the remoting and HTTP listeners' TLS (tls.py);
        `remoting_socket`: listen on it (bound already); `http`: False for a remoting-only
        worker process (workers.py)."""
        self.warehouse = warehouse
        self.remoting_socket = remoting_socket
        self.serves_http = http
        self.poll_interval_s = poll_interval_s
        limits = limits or Limits()
        if max_frame_bytes is not None:
            limits = replace(limits, max_frame_bytes=max_frame_bytes)
        if idle_timeout_s is not None:
            limits = replace(limits, idle_timeout_s=idle_timeout_s)
        self.metrics = Metrics(max_watermark_age_s=max_watermark_age_s)
        self.holder = SnapshotHolder()
        # the route gauges of the served snapshot (the console's health view lists the same)
        self.route_risks = RouteRisks()
        self.metrics.register(self._route_families)
        # the base index files: the directory of `serve --workers` (workers.py), which
        # every process of the service maps, else one of this service's own
        shared_dir = os.environ.get(DIR_ENV)
        self.owns_index_dir = not shared_dir
        self.shared = SharedIndexes(Path(shared_dir)) if shared_dir else SharedIndexes.create()
        self.refresher = Refresher(
            warehouse,
            self.holder,
            self.metrics,
            support_acting_master,
            order_message_enable=order_message_enable,
            shared=self.shared,
        )
        self.collector = collector
        self.console: Console | None = None  # with the HTTP server: the console's pages
        if collector is not None:  # it answers from the served snapshot, counts in /metrics
            collector.attach(self.holder, self.metrics)
        super().__init__(
            "remoting",
            self._respond,
            limits,
            self.metrics,
            log,
            host=host,
            port=port,
            http_port=http_port,
            tls=tls,
            http_tls=http_tls,
            known_codes=READ_CODES | (collector.codes if collector else frozenset()),
            # REGISTER_BROKER bodies reach MBs; client requests keep the small limit.
            max_frame_bytes=limits.collector_max_frame_bytes if collector else None,
            large_frame_codes=collector.large_frame_codes if collector else frozenset(),
        )

    def _route_families(self) -> Iterable[Metric]:
        served = self.holder.current
        return self.route_risks.families(served.index if served else None)

    def _respond(self, command: RemotingCommand) -> Reply | Awaitable[Reply]:
        if self.collector is not None and command.code in self.collector.codes:
            return self.collector.handle(command)
        served = self.holder.current  # one read per request: one snapshot
        return answer(served.index if served else None, command)

    async def start(self) -> None:
        self.in_background(
            self.refresher.run(self.poll_interval_s, self.stopping), "lookup-refresher"
        )
        if not self.serves_http:
            self.in_background(self._listen_once_loaded(), "lookup-worker-join")
            return
        await self.start_remoting(self.remoting_socket)
        app = create_app(self.holder, self.metrics, self.warehouse, self.route_risks)
        self.start_http(app)
        self.console = app.state.console
        self.in_background(self.console.keep_warm(self.stopping), "console-warm")
        if self.collector is not None:
            self.in_background(self.collector.run(self.stopping), "collector-ticker")
        log.info(
            "lookup service: remoting on %s:%d, http on %s:%d, warehouse %s%s; "
            "tls: remoting %s, http %s",
            self.host,
            self.port,
            self.host,
            self.http_port,
            self.warehouse,
            " (collecting broker requests)" if self.collector else "",
            self.listener.tls.mode,
            self.http_tls.mode,
        )
        if self.http_port is not None:  # bound by now
            log.info(
                "route console: %s", console_url(self.host, self.http_port, self.http_tls.enabled)
            )

    async def _listen_once_loaded(self) -> None:
        """A worker process (workers.py) listens on the shared port once it serves a
        snapshot: until then the kernel gives new connections to the processes that can
        answer them, not "no snapshot loaded yet"."""
        while self.holder.current is None and not self.stopping.is_set():
            await asyncio.sleep(JOIN_POLL_S)
        if not self.stopping.is_set():
            if self.remoting_socket is not None:
                self.remoting_socket.listen()  # bound, not listening yet (workers.py)
            await self.start_remoting(self.remoting_socket)
            log.debug("lookup worker: remoting on %s:%d", self.host, self.port)
        await self.stopping.wait()  # the service runs until a background task ends

    async def stop(self) -> None:
        # The refresher may be inside a warehouse read: no need to wait for it.
        await self.stop_serving(
            10, cancel_at_once=frozenset({"lookup-refresher", "console-warm", WORKERS_TASK})
        )
        if self.collector is not None:
            await self.collector.close()
        if self.owns_index_dir:  # mappings stay valid: a snapshot still held keeps its pages
            self.shared.remove()
        log.info("lookup service stopped")


def serve(
    warehouse: str,
    port: int,
    http_port: int,
    poll_interval_s: float,
    max_frame_bytes: int,
    support_acting_master: bool,
    *,
    host: str = LOOPBACK,
    limits: Limits | None = None,
    collector: BrokerRequests | None = None,
    max_watermark_age_s: float = 0.0,
    order_message_enable: bool = False,
    tls: ListenerTls = PLAIN,
    http_tls: ListenerTls = PLAIN,
    workers: int = 1,
) -> None:
    """Serve until Ctrl-C / SIGTERM (blocking; call from the main thread). Without `limits`,
    those of conf/routelake.toml [serve] (and ROUTELAKE_SERVE_* variables) apply.
    `workers` > 1: that many processes answer on the remoting port (workers.py); one
    process with a `collector` (its state is one process's)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    if limits is None:
        limits = Limits.from_config(load_config().serve)
    fix_mmap_threshold()  # before the first snapshot and the fork: every process has it
    options: dict[str, Any] = dict(
        host=host,
        port=port,
        http_port=http_port,
        poll_interval_s=poll_interval_s,
        max_frame_bytes=max_frame_bytes,
        support_acting_master=support_acting_master,
        limits=limits,
        collector=collector,
        max_watermark_age_s=max_watermark_age_s,
        order_message_enable=order_message_enable,
        tls=tls,
        http_tls=http_tls,
    )
    # uvloop (libuv) serves both protocols faster than the default asyncio loop.
    runner = uvloop.run if uvloop is not None else asyncio.run
    if uvloop is None:
        log.info("uvloop not installed (pip install 'routelake[uvloop]'): default asyncio loop")
    if workers > 1 and collector is None:
        serve_workers(warehouse, workers, options, runner, LookupService)
        return
    service = LookupService(warehouse, **options)
    runner(serve_until_signal(service))
