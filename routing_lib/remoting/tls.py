"""TLS on routelake's listeners, in the three server modes of RocketMQ (`tls.server.mode`):

- disabled: plain TCP only (the listeners' own code path, unchanged);
- permissive: TLS and plain clients on one port, told apart by their first byte, as the Java
  NameServer's default does (a TLS client opens with a handshake record, 0x16; a remoting frame
  opens with the high byte of its length, 0x00 for any frame below 16 MiB; an HTTP request
  with a letter);
- enforcing: TLS only; a plain client is closed at its first byte.

Both TLS modes run through `TlsAcceptor`: it accepts, waits for the first byte (peeked, not
read), then hands the socket to the event loop with or without TLS. Refusals and failed
handshakes are counted and logged like every other refusal (limits.Rejections).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

from routing_lib.config import project_path
from routing_lib.remoting.limits import Limits, Rejections

if TYPE_CHECKING:
    from routing_lib.config import TlsConfig

TLS_HANDSHAKE_RECORD = 0x16  # the record type of a ClientHello: a TLS client's first byte
ACCEPT_RETRY_S = 0.1  # after an accept() error such as EMFILE: do not spin
# A closing TLS connection waits this long for the client's close_notify (asyncio's default is
# 30 s, during which a stopping server still holds the connection; Netty waits 3 s).
TLS_SHUTDOWN_TIMEOUT_S = 3.0
E = TypeVar("E", bound=StrEnum)


class TlsMode(StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(StrEnum):
    """`tls.server.need.client.auth`: whether clients must present a certificate."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


_VERIFY_MODES = {
    ClientAuth.NONE: ssl.CERT_NONE,
    ClientAuth.OPTIONAL: ssl.CERT_OPTIONAL,
    ClientAuth.REQUIRE: ssl.CERT_REQUIRED,
}


@dataclass(frozen=True)
class ListenerTls:
    """One listener's TLS: its mode and, unless disabled, the server context."""

    mode: TlsMode = TlsMode.DISABLED
    context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        if (self.mode == TlsMode.DISABLED) != (self.context is None):
            raise ValueError("a TLS mode other than disabled needs a context, and only it")

    @property
    def enabled(self) -> bool:
        return self.mode != TlsMode.DISABLED


PLAIN = ListenerTls()


def server_context(
    cert_path: str,
    key_path: str,
    *,
    key_password: str = "",
    client_auth: ClientAuth = ClientAuth.NONE,
    trust_cert_path: str = "",
) -> ssl.SSLContext:
    """A server context with this certificate chain (PEM) and private key (PEM, encrypted when
    `key_password` is set). Clients then authenticate with a certificate signed by one in
    `trust_cert_path` when `client_auth` asks for one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # TLS 1.2+, no compression
    try:
        context.load_cert_chain(cert_path, key_path or None, key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"[tls] cannot load cert_path {cert_path!r} / key_path {key_path!r}: {exc}"
        ) from None
    context.verify_mode = _VERIFY_MODES[client_auth]
    if client_auth != ClientAuth.NONE:
        if not trust_cert_path:
            raise ValueError(f"[tls] client_auth = {client_auth.value!r} needs trust_cert_path")
        try:
            context.load_verify_locations(trust_cert_path)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"[tls] cannot load trust_cert_path {trust_cert_path!r}: {exc}"
            ) from None
    return context


def _choice(kind: type[E], value: str, key: str) -> E:
    try:
        return kind(value.strip().lower())
    except ValueError:
        names = " | ".join(m.value for m in kind)
        raise ValueError(f"[tls] {key} = {value!r}: expected {names}") from None


def listener_tls(config: TlsConfig) -> tuple[ListenerTls, ListenerTls]:
    """(remoting, HTTP) TLS of the listeners from the [tls] section; one context for both.
    Relative paths are taken like the config's other paths (config.project_path). Raises
    ValueError naming the key when the section is inconsistent."""
    mode = _choice(TlsMode, config.mode, "mode")
    http_mode = _choice(TlsMode, config.http_mode, "http_mode") if config.http_mode else mode
    if mode == TlsMode.DISABLED and http_mode == TlsMode.DISABLED:
        return PLAIN, PLAIN
    if not config.cert_path or not config.key_path:
        raise ValueError("[tls] a mode other than disabled needs cert_path and key_path")
    context = server_context(
        str(project_path(config.cert_path)),
        str(project_path(config.key_path)),
        key_password=config.key_password,
        client_auth=_choice(ClientAuth, config.client_auth, "client_auth"),
        trust_cert_path=str(project_path(config.trust_cert_path)) if config.trust_cert_path else "",
    )

    def one(m: TlsMode) -> ListenerTls:
        return ListenerTls(m, context if m != TlsMode.DISABLED else None)

    return one(mode), one(http_mode)


ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class TlsAcceptor:
    """Accepts on `sock` (bound, listening) and serves each connection with a protocol from
    `protocol_factory`: over TLS when its first byte opens a handshake, plain otherwise when
    the mode is permissive, closed otherwise. Has the close() of an asyncio.Server."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: ProtocolFactory,
        tls: ListenerTls,
        limits: Limits,
        rejections: Rejections,
        listener: str,
    ) -> None:
        assert tls.enabled and tls.context is not None
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.tls = tls
        self.context: ssl.SSLContext = tls.context
        self.limits = limits
        self.rejections = rejections
        self.listener = listener
        # Connections not yet handed over (waiting for their first byte or handshake): bounded
        # like the served ones, they would otherwise hold sockets at no cost to the client.
        self._sorting: set[asyncio.Task[None]] = set()
        self._accepting: asyncio.Task[None] | None = None

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.sock,)

    def start(self) -> TlsAcceptor:
        self.sock.setblocking(False)
        self._accepting = asyncio.ensure_future(self._accept_loop())
        return self

    def close(self) -> None:
        """No new connections; those not yet handed over are closed."""
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._sorting):
            task.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        """Until the accept loop and the connections being sorted have ended (after close)."""
        tasks = [t for t in (self._accepting, *self._sorting) if t is not None]
        if tasks:
            await asyncio.wait(tasks)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(self.sock)
            except OSError:  # EMFILE and the like: the next accept may work
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if len(self._sorting) >= self.limits.max_connections:
                self.rejections(self.listener, "max_connections", peer, "awaiting first byte")
                conn.close()
                continue
            task = asyncio.ensure_future(self._sort(conn, peer))
            self._sorting.add(task)
            task.add_done_callback(self._sorting.discard)

    async def _sort(self, conn: socket.socket, peer: object) -> None:
        """Peek at the first byte, then hand `conn` over with TLS, plain, or close it."""
        handed_over = False
        try:
            conn.setblocking(False)
            first = await self._first_byte(conn)
            if first is None:
                self.rejections(self.listener, "idle_timeout", peer, "no first byte")
                return
            if first == b"":
                return  # connected and left (a port probe): nothing to say
            loop = asyncio.get_running_loop()
            if first[0] == TLS_HANDSHAKE_RECORD:
                try:
                    await loop.connect_accepted_socket(
                        self.protocol_factory,
                        conn,
                        ssl=self.context,
                        ssl_handshake_timeout=self.limits.request_timeout_s,
                        ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT_S,
                    )
                except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                    self.rejections(self.listener, "tls_handshake_failed", peer, _reason(exc))
                    return
            elif self.tls.mode == TlsMode.PERMISSIVE:
                await loop.connect_accepted_socket(self.protocol_factory, conn)
            else:
                self.rejections(
                    self.listener,
                    "tls_required",
                    peer,
                    "a plain (non-TLS) client; [tls] mode is enforcing",
                )
                return
            handed_over = True
        except OSError:
            return  # the peer went away while being sorted
        finally:
            if not handed_over:
                conn.close()

    async def _first_byte(self, conn: socket.socket) -> bytes | None:
        """The connection's first byte, left unread (b"" at EOF), or None after the idle
        timeout: a client may connect and send later, as it may on a plain listener."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.idle_timeout_s
        while True:
            readable = loop.create_future()

            def ready(readable: asyncio.Future[None] = readable) -> None:
                if not readable.done():
                    readable.set_result(None)

            loop.add_reader(conn.fileno(), ready)
            try:
                await asyncio.wait_for(readable, max(0.0, deadline - loop.time()))
            except TimeoutError:
                return None
            finally:
                loop.remove_reader(conn.fileno())
            with contextlib.suppress(BlockingIOError):  # a spurious wake-up: wait again
                return conn.recv(1, socket.MSG_PEEK)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "handshake not complete within request_timeout_s"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return exc.reason  # e.g. SSLV3_ALERT_CERTIFICATE_UNKNOWN: the client distrusts us
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")
