"""The hardened RocketMQ remoting listener (asyncio TCP) shared by the lookup and the collector.

It reads and decodes frames, enforces `Limits` (frame size, deadlines, connection count,
unread answers), and hands each request to a responder. A responder returns the response
at once (the lookup: answered from memory, in order) or an awaitable of it (the collector:
answered once Kafka acknowledged); awaited answers are written when ready, matched by opaque
like every RocketMQ answer, with at most `max_pending` of them per connection.

Each accepted connection is a `Connection` (numbered from 1 per listener) that a responder can
read while it answers (`current_connection`) and ask to be told how the connection ended: the
collector publishes CHANNEL_CLOSED from it, as RocketMQ's BrokerHousekeepingService does.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import itertools
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from routing_lib.remoting.frames import (
    FrameDecoder,
    RemotingCodecError,
    RemotingCommand,
    encode_head,
)
from routing_lib.remoting.limits import Limits, Rejections, ThrottledLog
from routing_lib.remoting.protocol import NAMESRV_VERSION, ResponseCode
from routing_lib.remoting.service_metrics import Metrics
from routing_lib.remoting.tls import PLAIN, TLS_HANDSHAKE_RECORD, ListenerTls, TlsAcceptor

READ_CHUNK = 64 * 1024
# A batch of pipelined requests is answered into the socket buffer; past this much unsent,
# wait for the client to read before answering more (its answers, not its requests, grow).
WRITE_HIGH_WATER = 64 * 1024
SHARE_BODY_BYTES = 16 * 1024  # larger answer bodies are written as they are, not copied
MAX_PENDING = 64  # awaited answers per connection; reading pauses while this many are open

Reply = RemotingCommand | None
Responder = Callable[[RemotingCommand], Reply | Awaitable[Reply]]
# The peer address (socket peername) of the connection whose request is being answered: set
# once per connection task, so a responder can read it (the collector's admin allow-list).
current_peer: ContextVar[object] = ContextVar("routelake_remoting_peer", default=None)


class ConnectionEnd(enum.Enum):
    """How a connection ended (RocketMQ's NettyConnectManageHandler: close, exception, idle)."""

    CLOSED = "closed"  # the peer closed it
    FAILED = "failed"  # reset, a bad frame, a frame not whole in time, answers left unread
    IDLE = "idle"  # nothing read for idle_timeout_s (serverChannelMaxIdleTimeSeconds)
    STOPPING = "stopping"  # the listener closed it: the service is stopping


ConnectionWatcher = Callable[[ConnectionEnd], None]


@dataclass(eq=False)
class Connection:
    """One accepted connection: its number (per listener, from 1), its peer, and whom to tell
    how it ended (called once, after the answers it awaited were written or given up)."""

    number: int
    peer: object
    watchers: list[ConnectionWatcher] = field(default_factory=list)

    def when_ended(self, watcher: ConnectionWatcher) -> None:
        self.watchers.append(watcher)


# The connection whose request is being answered (None outside a listener's connection task).
current_connection: ContextVar[Connection | None] = ContextVar(
    "routelake_remoting_connection", default=None
)


class RemotingListener:
    def __init__(
        self,
        name: str,
        respond: Responder,
        limits: Limits,
        metrics: Metrics,
        rejections: Rejections,
        log: logging.Logger,
        *,
        known_codes: frozenset[int],
        max_frame_bytes: int | None = None,
        large_frame_codes: frozenset[int] = frozenset(),
        pending_timeout_s: float = 30.0,
        tls: ListenerTls = PLAIN,
    ) -> None:
        """`max_frame_bytes` (default limits.max_frame_bytes) bounds every frame; a request
        whose code is not in `large_frame_codes` must also fit limits.max_frame_bytes.
        `tls`: its mode (tls.py) and certificate."""
        self.name = name
        self.respond = respond
        self.limits = limits
        self.metrics = metrics
        self.rejections = rejections
        self.log = log
        self.known_codes = known_codes
        # the metric label of each known request code, made once
        self._request_names = {code: str(code) for code in known_codes}
        self.max_frame_bytes = max_frame_bytes or limits.max_frame_bytes
        self.large_frame_codes = large_frame_codes
        self.pending_timeout_s = pending_timeout_s
        self.tls = tls
        self.port = 0
        self._frame_log = ThrottledLog(log)
        self._server: asyncio.Server | TlsAcceptor | None = None
        self._stopping = False
        self._numbers = itertools.count(1)
        # the connection tasks asyncio.start_server runs (asyncio.current_task types them Any)
        self.connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    async def start(self, host: str, port: int, sock: socket.socket | None = None) -> int:
        """Listen on (host, port), or on `sock`, a socket bound already (worker processes
        sharing one port: workers.py)."""
        if not self.tls.enabled:
            if sock is not None:
                self._server = await asyncio.start_server(
                    self._connection, sock=sock, limit=READ_CHUNK
                )
            else:
                self._server = await asyncio.start_server(
                    self._connection, host, port, limit=READ_CHUNK
                )
        else:  # the same connection handler, behind the TLS/plain sorting
            loop = asyncio.get_running_loop()

            def stream_protocol() -> asyncio.StreamReaderProtocol:
                reader = asyncio.StreamReader(limit=READ_CHUNK, loop=loop)
                return asyncio.StreamReaderProtocol(reader, self._connection, loop=loop)

            self._server = TlsAcceptor(
                sock or socket.create_server((host, port)),
                stream_protocol,
                self.tls,
                self.limits,
                self.rejections,
                "remoting",
            ).start()
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def close(self) -> None:
        """No new connections; open ones are closed (their tasks then end)."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for writer in list(self.connections.values()):
            writer.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        current_peer.set(peer)  # this task's own context: one connection
        if len(self.connections) >= self.limits.max_connections:
            self.rejections("remoting", "max_connections", peer)
            writer.close()
            return
        connection = Connection(next(self._numbers), peer)
        current_connection.set(connection)
        self.connections[task] = writer
        self.metrics.connection_opened()
        pending: set[asyncio.Task[None]] = set()
        end = ConnectionEnd.FAILED
        try:
            end = await self._serve_connection(reader, writer, peer, pending)
        except ConnectionError:
            pass  # the peer went away
        except Exception:  # a bug must cost one connection, not the server (nor flood the log)
            self._frame_log.log(
                "connection-bug",
                logging.ERROR,
                "remoting connection from %s failed",
                peer,
                exc_info=True,
            )
        finally:
            if pending:  # answers still awaited (Kafka acks): give them their time
                _, late = await asyncio.wait(pending, timeout=self.pending_timeout_s)
                for t in late:
                    t.cancel()
            self.metrics.connection_closed()
            self.connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._ended(connection, ConnectionEnd.STOPPING if self._stopping else end)

    def _ended(self, connection: Connection, end: ConnectionEnd) -> None:
        for watcher in connection.watchers:
            try:
                watcher(end)
            except Exception:  # one watcher's bug must not hide the end from the others
                self._frame_log.log(
                    "connection-watcher",
                    logging.ERROR,
                    "remoting: telling the end of a connection from %s failed",
                    connection.peer,
                    exc_info=True,
                )

    async def _serve_connection(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: object,
        pending: set[asyncio.Task[None]],
    ) -> ConnectionEnd:
        """Read, decode, answer until EOF, a bad frame or a timeout: how the connection ended.
        Between frames the idle timeout applies; once a frame has begun it must be whole within
        the request timeout (a deadline that more bytes do not move)."""
        loop = asyncio.get_running_loop()
        decoder = FrameDecoder(self.max_frame_bytes)
        frame_deadline: float | None = None
        first_read = True
        # One timeout scope per connection, moved to each read's deadline and off while
        # answering (the drain has its own): entering an asyncio.timeout per read cost ~5 us.
        try:
            async with asyncio.timeout(None) as read_deadline:
                while not self._stopping:
                    if frame_deadline is None:
                        read_deadline.reschedule(loop.time() + self.limits.idle_timeout_s)
                    else:
                        read_deadline.reschedule(frame_deadline)
                    data = await reader.read(READ_CHUNK)
                    read_deadline.reschedule(None)
                    if not data:
                        return ConnectionEnd.CLOSED
                    if first_read and self._tls_on_plain_port(data, peer):
                        return ConnectionEnd.FAILED
                    first_read = False
                    commands = self._decoded(decoder, data, peer)
                    if commands is None:
                        return ConnectionEnd.FAILED
                    if not decoder.buffered:
                        frame_deadline = None
                    elif commands or frame_deadline is None:  # a new frame began in this read
                        frame_deadline = loop.time() + self.limits.request_timeout_s
                    if not await self._answer_all(commands, writer, peer, pending):
                        return ConnectionEnd.FAILED
                    if decoder.error is not None:  # the frames before it are answered: close
                        self._frame_error(decoder.error, peer)
                        return ConnectionEnd.FAILED
        except TimeoutError:
            if not read_deadline.expired():
                raise  # not the read's deadline (a bug: the drain catches its own)
            reason = "idle_timeout" if frame_deadline is None else "request_timeout"
            self.rejections("remoting", reason, peer)
            return ConnectionEnd.IDLE if frame_deadline is None else ConnectionEnd.FAILED
        return ConnectionEnd.STOPPING

    def _decoded(
        self, decoder: FrameDecoder, data: bytes, peer: object
    ) -> list[RemotingCommand] | None:
        """The frames `data` completes; None (logged) when it breaks the framing."""
        try:
            return decoder.feed(data)
        except RemotingCodecError as exc:
            self._frame_error(exc, peer)
            return None

    def _tls_on_plain_port(self, first: bytes, peer: object) -> bool:
        """A TLS client on a plain port (rejected and counted): its first byte, read as a
        frame length, would mean over 350 MB."""
        if first[0] != TLS_HANDSHAKE_RECORD or self.tls.enabled:
            return False
        self.rejections("remoting", "tls_not_enabled", peer, "a TLS client; [tls] mode is disabled")
        return True

    async def _answer_all(
        self,
        commands: list[RemotingCommand],
        writer: asyncio.StreamWriter,
        peer: object,
        pending: set[asyncio.Task[None]],
    ) -> bool:
        """Answer (or start answering) each command; False: the connection must close.
        The answers given at once are written together, one write per read of pipelined
        requests (a write is a send() system call: one per answer cost more than answering)."""
        out: list[bytes] = []
        observed: list[tuple[str, str, float]] = []  # counted once per read, as written
        out_bytes = 0
        try:
            for command in commands:
                if writer.is_closing():
                    return False  # the peer went away mid-batch: its answers have no reader
                if (
                    command.frame_bytes > self.limits.max_frame_bytes
                    and command.code not in self.large_frame_codes
                ):
                    self.rejections(
                        "remoting",
                        "frame_too_large",
                        peer,
                        f"{command.frame_bytes} bytes, code {command.code}",
                    )
                    return False
                started = time.perf_counter()
                reply = self._respond(command)
                # an answer at once is the usual case: tested first (isawaitable costs more)
                if type(reply) is not RemotingCommand and inspect.isawaitable(reply):
                    task = asyncio.ensure_future(self._finish(reply, command, writer, started))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    if len(pending) >= MAX_PENDING:
                        out_bytes = self._flush(writer, out, observed)
                        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    continue
                out_bytes += self._encode(out, observed, command, reply, started)
                if out_bytes > WRITE_HIGH_WATER:
                    out_bytes = self._flush(writer, out, observed)
                    if writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                        await self._drain(writer, peer)
        finally:  # what was answered is sent, also when the connection closes after it
            self._flush(writer, out, observed)
        await self._drain(writer, peer)
        return True

    def _flush(
        self,
        writer: asyncio.StreamWriter,
        out: list[bytes],
        observed: list[tuple[str, str, float]],
    ) -> int:
        """Write the answers in `out` at once and count their requests: 0 bytes left."""
        _flush(writer, out)
        self.metrics.observe_many("remoting", observed)
        observed.clear()
        return 0

    def _failed(self, command: RemotingCommand) -> Reply:
        """Answering raised (called from its except block): logged, SYSTEM_ERROR answered."""
        self._frame_log.log(
            "answer", logging.ERROR, "answering request code %s failed", command.code, exc_info=True
        )
        return _internal_error(command)

    def _respond(self, command: RemotingCommand) -> Reply | Awaitable[Reply]:
        try:
            return self.respond(command)
        except Exception:
            return self._failed(command)

    async def _finish(
        self,
        reply: Awaitable[Reply],
        command: RemotingCommand,
        writer: asyncio.StreamWriter,
        started: float,
    ) -> None:
        try:
            response = await reply
        except asyncio.CancelledError:
            raise
        except Exception:
            response = self._failed(command)
        if writer.is_closing():
            response = None  # nobody to read it
        self._write(writer, command, response, started)

    def _write(
        self,
        writer: asyncio.StreamWriter,
        command: RemotingCommand,
        response: Reply,
        started: float,
    ) -> None:
        out: list[bytes] = []
        observed: list[tuple[str, str, float]] = []
        self._encode(out, observed, command, response, started)
        _flush(writer, out)
        self.metrics.observe_many("remoting", observed)

    def _encode(
        self,
        out: list[bytes],
        observed: list[tuple[str, str, float]],
        command: RemotingCommand,
        response: Reply,
        started: float,
    ) -> int:
        """Append the response's frame to `out` (nothing for None) and the request's
        (request, code, seconds) to `observed`: the bytes appended."""
        size = 0
        if response is not None:
            try:
                head = encode_head(response)
            except Exception:
                self._frame_log.log(
                    "answer",
                    logging.ERROR,
                    "encoding the answer to code %s failed",
                    command.code,
                    exc_info=True,
                )
                response = _internal_error(command)
                head = b"" if response is None else encode_head(response)
            if response is not None:
                if len(response.body) < SHARE_BODY_BYTES:
                    out.append(head + response.body)  # one piece: cheaper for small answers
                else:  # the index's shared bytes: written, not copied into each frame
                    out += (head, response.body)
                size = len(head) + len(response.body)
        request = self._request_names.get(command.code, "other")
        code = _code_name(response.code) if response else "none"
        observed.append((request, code, time.perf_counter() - started))
        return size

    async def _drain(self, writer: asyncio.StreamWriter, peer: object) -> None:
        """Back-pressure per connection: a slow reader waits here, nobody else does; one that
        reads nothing for the idle timeout is closed."""
        transport = writer.transport
        if not transport.get_write_buffer_size() and not transport.is_closing():
            return  # all sent: nothing to wait for (the usual case; no timer per read)
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):  # no task, unlike wait_for
                await writer.drain()
        except TimeoutError:
            self.rejections("remoting", "write_timeout", peer)
            raise ConnectionResetError("answers not read") from None

    def _frame_error(self, exc: RemotingCodecError, peer: object) -> None:
        name = type(exc).__name__
        self.metrics.frame_error(name)
        self._frame_log.log(
            name, logging.WARNING, "remoting: closing connection from %s: %s", peer, exc
        )


def _flush(writer: asyncio.StreamWriter, out: list[bytes]) -> int:
    """Write the pieces in `out` at once (uvloop: one writev) and empty it: 0 bytes left."""
    if out and not writer.is_closing():
        writer.writelines(out)
    out.clear()
    return 0


_CODE_NAMES: dict[int, str] = {}  # response code -> its metric label (a few dozen codes)


def _code_name(code: int) -> str:
    name = _CODE_NAMES.get(code)
    if name is None:
        name = str(code)
        if len(_CODE_NAMES) < 1024:  # codes come from responders: bounded all the same
            _CODE_NAMES[code] = name
    return name


def _internal_error(command: RemotingCommand) -> Reply:
    if command.is_oneway or command.is_response:
        return None
    return command.response(ResponseCode.SYSTEM_ERROR, "internal error", version=NAMESRV_VERSION)
