"""Start-up and shutdown of a network service (the lookup, the collector): its remoting
listener, an optional guarded HTTP server (uvicorn) and background tasks on one event loop,
run until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Coroutine, Iterator
from typing import Any, Protocol

import uvicorn
from fastapi import FastAPI

from routing_lib.remoting.http_guard import guarded_protocol
from routing_lib.remoting.limits import Limits, Rejections
from routing_lib.remoting.listener import RemotingListener, Responder
from routing_lib.remoting.service_metrics import Metrics
from routing_lib.remoting.tls import PLAIN, ListenerTls, TlsAcceptor

LOOPBACK = "127.0.0.1"


class _Uvicorn(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, limits: Limits, tls: ListenerTls, rejections: Rejections
    ) -> None:
        super().__init__(config)
        self.limits = limits
        self.tls = tls
        self.rejections = rejections

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals belong to serve(), which stops this server with the rest of the service.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """With TLS, uvicorn starts without listeners and a TlsAcceptor serves the socket
        with uvicorn's own protocol (built as uvicorn's startup builds it): one port can then
        take https and, when permissive, http."""
        if not self.tls.enabled or not sockets:
            await super().startup(sockets)
            return
        await super().startup([])
        loop = asyncio.get_running_loop()
        config = self.config

        def http_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=loop,
            )

        acceptors = [
            TlsAcceptor(sock, http_protocol, self.tls, self.limits, self.rejections, "http")
            for sock in sockets
        ]
        # uvicorn's shutdown only calls close() on what it started
        self.servers = [acceptor.start() for acceptor in acceptors]  # type: ignore[misc]


def http_server(
    app: FastAPI,
    limits: Limits,
    rejections: Rejections,
    host: str,
    port: int,
    tls: ListenerTls = PLAIN,
) -> tuple[uvicorn.Server, socket.socket]:
    """A uvicorn server for `app` with the listeners' limits, on a socket bound now (port 0 =
    ephemeral); run it with `server.serve(sockets=[sock])`, stop it with `should_exit`."""
    sock = socket.create_server((host, port))
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        http=guarded_protocol(limits, rejections),
        ws="none",
        server_header=False,
        # uvicorn declares an int but hands it to loop.call_later: fractions work
        timeout_keep_alive=limits.http_keepalive_timeout_s,  # type: ignore[arg-type]
    )
    return _Uvicorn(config, limits, tls, rejections), sock


class NetworkService:
    """A remoting listener, an optional HTTP server and background tasks, started and stopped
    together. Port 0 = ephemeral; `port` and `http_port` hold the bound ports once started."""

    def __init__(
        self,
        name: str,
        respond: Responder,
        limits: Limits,
        metrics: Metrics,
        log: logging.Logger,
        *,
        host: str,
        port: int,
        http_port: int | None,
        tls: ListenerTls,
        http_tls: ListenerTls,
        known_codes: frozenset[int],
        max_frame_bytes: int | None,
        large_frame_codes: frozenset[int],
    ) -> None:
        """`known_codes`: the request codes counted by code in /metrics (the others as
        "other": a client cannot blow up the label set); `max_frame_bytes` (default
        limits.max_frame_bytes) bounds every frame, the small client limit applies to the
        other codes than `large_frame_codes` (listener.py)."""
        self.name = name
        self.limits = limits
        self.metrics = metrics
        self.rejections = Rejections(metrics, log)
        self.log = log
        self.listener = RemotingListener(
            name,
            respond,
            limits,
            metrics,
            self.rejections,
            log,
            known_codes=known_codes,
            max_frame_bytes=max_frame_bytes,
            large_frame_codes=large_frame_codes,
            tls=tls,
        )
        self.host = host
        self.port = port
        self.http_port = http_port
        self.http_tls = http_tls
        self.stopping = asyncio.Event()  # set first by stop(): background loops end on it
        self.tasks: list[asyncio.Task[None]] = []
        self._http: uvicorn.Server | None = None

    def in_background(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        self.tasks.append(asyncio.create_task(coroutine, name=name))

    async def start_remoting(self, sock: socket.socket | None = None) -> None:
        """Listen on `sock` (bound already) or on host:port."""
        self.port = await self.listener.start(self.host, self.port, sock)

    def start_http(self, app: FastAPI) -> None:
        assert self.http_port is not None, "a service without an HTTP port"
        self._http, sock = http_server(
            app, self.limits, self.rejections, self.host, self.http_port, self.http_tls
        )
        self.http_port = sock.getsockname()[1]
        self.in_background(self._http.serve(sockets=[sock]), f"{self.name}-http")

    async def wait(self, stop: asyncio.Event) -> None:
        """Until `stop` is set or a listener or background task ends."""
        await until_stopped(stop, self.tasks)
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                self.log.error("%s: %s failed: %r", self.name, task.get_name(), task.exception())

    async def stop_serving(self, grace_s: float, cancel_at_once: frozenset[str]) -> None:
        """No new connections; open ones end after their awaited answers, background tasks
        on `stopping`, all within `grace_s`; the tasks named in `cancel_at_once` (a warehouse
        read, say) are not waited for."""
        self.stopping.set()
        self.listener.close()
        if self._http is not None:
            self._http.should_exit = True
        for task in self.tasks:
            if task.get_name() in cancel_at_once:
                task.cancel()
        pending = [*self.tasks, *self.listener.connections]
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace_s)
            for task in late:
                task.cancel()


class Serving(Protocol):
    """A server with a network service's lifecycle (LookupService, CollectorServer)."""

    async def start(self) -> None: ...

    async def wait(self, stop: asyncio.Event) -> None: ...

    async def stop(self) -> None: ...


async def until_stopped(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    """Until `stop` is set or one of a server's tasks (a listener, the refresher) ends."""
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()


async def serve_until_signal(
    server: Serving, signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
) -> None:
    """Run `server` until one of `signals` (SIGINT/SIGTERM), then stop it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        await server.wait(stop)
    finally:
        await server.stop()
        for sig in signals:
            loop.remove_signal_handler(sig)
