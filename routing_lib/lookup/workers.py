"""Several processes answering on one remoting port (`routectl serve --workers N`).

One Python process answers on one core; the Java NameServer uses all of them. Here the
first process (the primary) binds the remoting port with SO_REUSEPORT and then forks N-1
workers, each binding its own SO_REUSEPORT socket on the same port, so the kernel spreads
new connections over the N processes. Each process has its own refresher and index (the
index is built from the change feed, so a snapshot costs each process what changed).

The primary alone serves HTTP. Every second a worker sends its counters (metrics.export)
over a socketpair; the primary's /metrics sums them with its own, and its /readyz answers
503 until every worker has a snapshot. Workers die with the primary (PR_SET_PDEATHSIG) and
are stopped by it on SIGTERM. A worker that dies is logged and not replaced (forking a
process that runs an event loop and threads is not safe): the others keep the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import pickle
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from routing_lib.remoting.service import serve_until_signal

log = logging.getLogger("routelake.lookup")
REPORT_INTERVAL_S = 1.0
PR_SET_PDEATHSIG = 1
_LENGTH = struct.Struct(">I")

Runner = Callable[[Coroutine[Any, Any, None]], None]
# Builds the service a process serves (server.py passes LookupService): taking the factory keeps
# this module free of the server's import, which imports this one to start the workers.
ServiceFactory = Callable[..., Any]


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket with SO_REUSEPORT: several may listen on one port."""
    sock = socket.create_server((host, port), reuse_port=True)
    sock.setblocking(False)
    return sock


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


async def _report(service: Any, channel: socket.socket) -> None:
    """A worker's loop: send its counters to the primary every REPORT_INTERVAL_S."""
    loop = asyncio.get_running_loop()
    while True:
        data = pickle.dumps(service.metrics.export(service.holder.current is not None))
        await loop.sock_sendall(channel, _LENGTH.pack(len(data)) + data)
        await asyncio.sleep(REPORT_INTERVAL_S)


async def _worker_main(service: Any, channel: socket.socket) -> None:
    channel.setblocking(False)
    reporter = asyncio.create_task(_report(service, channel))
    try:
        await serve_until_signal(service)
    finally:
        reporter.cancel()


def _run_worker(
    warehouse: str | Path,
    options: dict[str, Any],
    port: int,
    channel: socket.socket,
    runner: Runner,
    make_service: ServiceFactory,
) -> None:
    """In the forked child: serve remoting until SIGTERM, then exit without returning."""
    code = 0
    try:
        _die_with_parent()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        sock = shared_port_socket(options["host"], port)
        service = make_service(
            warehouse, **{**options, "port": port}, remoting_socket=sock, http=False
        )
        runner(_worker_main(service, channel))
    except BaseException:  # noqa: BLE001  whatever ends a worker, it must not return
        log.exception("lookup worker %d failed", os.getpid())
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Workers:
    """The primary's side: start, watch, read reports from, and stop the workers."""

    def __init__(
        self,
        warehouse: str | Path,
        options: dict[str, Any],
        port: int,
        runner: Runner,
        make_service: ServiceFactory,
    ) -> None:
        self.warehouse = warehouse
        self.make_service = make_service
        self.options = options
        self.port = port
        self.runner = runner
        self.channels: dict[int, socket.socket] = {}  # pid -> primary's end

    def start_one(self, listening: list[socket.socket]) -> int:
        """Fork one worker (only before this process starts an event loop or a thread)."""
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the child: not the primary's sockets
            for sock in [ours, *listening, *self.channels.values()]:
                sock.close()
            _run_worker(
                self.warehouse, self.options, self.port, theirs, self.runner, self.make_service
            )
        theirs.close()
        self.channels[pid] = ours
        return pid

    async def watch(self, metrics: Any) -> None:
        """Read reports; a worker that ends is logged and no longer waited for (its socket
        closed with it: the kernel routes new connections to the processes left)."""
        readers = {pid: asyncio.create_task(self._read(pid, metrics)) for pid in self.channels}
        while self.channels:
            await asyncio.sleep(0.5)
            for pid in list(self.channels):
                with contextlib.suppress(ChildProcessError):
                    if not os.waitpid(pid, os.WNOHANG)[0]:
                        continue
                log.error("lookup worker %d ended; %d processes left", pid, len(self.channels))
                self.channels.pop(pid).close()
                metrics.peers.pop(pid, None)
                metrics.expected_peers -= 1
                readers.pop(pid).cancel()

    async def _read(self, pid: int, metrics: Any) -> None:
        reader, writer = await asyncio.open_connection(sock=self.channels[pid])
        try:
            while True:
                size = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0]
                metrics.peers[pid] = pickle.loads(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def stop(self, timeout_s: float = 15.0) -> None:
        for pid in self.channels:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for pid in list(self.channels):
            while time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        break
                    time.sleep(0.05)
                    continue
                break
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        for channel in self.channels.values():
            channel.close()


def serve_workers(
    warehouse: str | Path,
    count: int,
    options: dict[str, Any],
    runner: Runner,
    make_service: ServiceFactory,
) -> None:
    """The primary: bind, fork count-1 workers, serve (HTTP too) until SIGTERM, stop them."""
    sock = shared_port_socket(options["host"], options["port"])
    port = sock.getsockname()[1]
    workers = Workers(warehouse, options, port, runner, make_service)
    for _ in range(count - 1):  # before any event loop or thread exists in this process
        workers.start_one([sock])
    service = make_service(warehouse, **{**options, "port": port}, remoting_socket=sock)
    service.metrics.expected_peers = count - 1
    log.info("lookup service: %d processes on remoting port %d", count, port)

    async def primary() -> None:
        watcher = asyncio.create_task(workers.watch(service.metrics))
        try:
            await serve_until_signal(service)
        finally:
            watcher.cancel()

    try:
        runner(primary())
    finally:
        workers.stop()
