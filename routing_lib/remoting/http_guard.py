"""The HTTP listener's protocol: uvicorn's httptools protocol plus the limits it lacks.

Why a subclass and not uvicorn options: with httptools, uvicorn 0.54 (pinned) has no limit
on the request line, the header size or the header count (httptools joins a header's
fragments itself, unbounded, before any callback sees it); its keep-alive timer is armed only
after a response and restarts on every read, so a silent or trickling client is never timed
out; `limit_concurrency` answers 503 but keeps idle sockets open; and llhttp takes request
lines without a version (HTTP/0.9) or with HTTP/2.0. So bytes are metered before they reach
the parser, and the protocol keeps its own deadline. It relies on HttpToolsProtocol's
attributes (parser, cycle, pipeline, connections, transport, flow).
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Any, ClassVar, NoReturn

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from routing_lib.remoting.limits import HTTP_MAX_PIPELINED, Limits, Rejections

_VERSIONS = ("1.0", "1.1")


class _Refused(Exception):
    """Raised in a parser callback; the refusal itself is in the protocol's _refusal."""


def status_response(status: int) -> bytes:
    """A whole `connection: close` answer, for requests the app never sees."""
    phrase = HTTPStatus(status).phrase
    return (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(phrase)}\r\nconnection: close\r\n\r\n{phrase}"
    ).encode()


def guarded_protocol(limits: Limits, rejections: Rejections) -> type[GuardedHttpProtocol]:
    """The protocol class for uvicorn.Config(http=...), bound to one service's limits."""
    return type(
        "BoundGuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {"limits": limits, "rejections": rejections},
    )


class GuardedHttpProtocol(HttpToolsProtocol):
    limits: ClassVar[Limits]
    rejections: ClassVar[Rejections]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._in_request = False  # from a request's first byte to its last
        self._in_head = False  # request line and headers not complete yet
        self._head_bytes = self._url_bytes = self._header_count = self._body_bytes = 0
        self._refusal: tuple[int, str] = (400, "bad_request")
        self._closed = False  # refused or expired: nothing more is read

    # -- connection --

    # asyncio declares BaseTransport; the event loop hands a stream protocol a Transport
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, "max_connections")
        else:
            self._arm(self.limits.http_keepalive_timeout_s, "idle_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._unset_keepalive_if_required()
        if not self._in_request:
            self._begin_request()
        try:
            self._feed(data)
        except (_Refused, httptools.HttpParserError):  # a callback's _Refused arrives wrapped
            self._refuse(*self._refusal)
        except httptools.HttpParserUpgrade:
            # No WebSocket or h2c here: the request is answered as plain HTTP, then closed.
            self._closed = True
            if not self._close_after_pending():
                self.transport.close()
        except Exception:  # a bug costs this connection and one log line per interval
            self.rejections.log.log(
                "http-bug",
                logging.ERROR,
                "http: request from %s failed",
                self._peer(),
                exc_info=True,
            )
            self._closed = True
            self.transport.close()

    def _feed(self, data: bytes) -> None:
        # While a head is incomplete, feed no more than what is left of its budget. (A head
        # pipelined behind a body in the same read goes in with it: one read at most extra.)
        while data:
            if not self._in_head:
                self.parser.feed_data(data)  # bodies are metered in on_body
                return
            room = self.limits.http_max_header_bytes - self._head_bytes
            if room <= 0:
                self._reject(431, "header_too_large")
            chunk, data = data[:room], data[room:]
            self._head_bytes += len(chunk)
            self.parser.feed_data(chunk)

    # -- parser callbacks --

    def on_message_begin(self) -> None:
        if not self._in_request:  # a pipelined request that began inside the last read
            self._begin_request()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > self.limits.http_max_request_line_bytes:
            self._reject(414, "request_line_too_long")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.http_max_headers:
            self._reject(431, "too_many_headers")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        version = self.parser.get_http_version()
        if version not in _VERSIONS:  # "GET /x" alone parses as HTTP/0.9
            self._reject(400 if version.startswith("0.") else 505, "bad_http_version")
        if len(self.pipeline) >= HTTP_MAX_PIPELINED:
            self._reject(503, "pipeline_too_deep")
        if self._declared_body() > self.limits.http_max_body_bytes:
            self._reject(413, "body_too_large")  # before the app sees the request
        self._in_head = False
        super().on_headers_complete()

    def _declared_body(self) -> int:
        # llhttp has checked the value is a number; a chunked body is metered in on_body.
        lengths = [int(v) for n, v in self.headers if n == b"content-length"]
        return max(lengths, default=0)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.http_max_body_bytes:
            self._reject(413, "body_too_large")
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_request = False
        # Until the answer is out: a client that never reads it does not hold a slot forever.
        self._arm(self.limits.idle_timeout_s, "write_timeout")

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._closed:
            return  # the refusal's deadline stays
        if self._in_request:  # the next request is arriving: its own deadline governs
            self._unset_keepalive_if_required()
            return
        if self.pipeline or not self.cycle.response_complete:
            self._arm(self.limits.idle_timeout_s, "write_timeout")
        else:
            self._disarm()  # idle: uvicorn's keep-alive timer (same timeout) takes over

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self.rejections("http", "idle_timeout", self._peer())
        super().timeout_keep_alive_handler()

    # -- refusing and expiring --

    def _begin_request(self) -> None:
        self._in_request = self._in_head = True
        self._head_bytes = self._url_bytes = self._header_count = self._body_bytes = 0
        self._arm(self.limits.request_timeout_s, "request_timeout")

    def _reject(self, status: int, reason: str) -> NoReturn:
        self._refusal = (status, reason)
        raise _Refused(reason)

    def _refuse(self, status: int, reason: str) -> None:
        """Answer what came before (then close), or answer `status` now and close."""
        self._closed = True
        self.rejections("http", reason, self._peer())
        if self._close_after_pending():
            self._arm(self.limits.request_timeout_s, "closing")  # the answers' deadline
            return
        self.transport.write(status_response(status))
        self.transport.close()

    def _close_after_pending(self) -> bool:
        """True if an answer is still due: the last one due now closes the connection."""
        last = self.pipeline[0][0] if self.pipeline else self.cycle  # (cycle, app) pairs
        if last is None or last.response_complete:
            return False
        last.keep_alive = False
        if not self.transport.is_closing():
            self.transport.pause_reading()
        return True

    def _expire(self, reason: str) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if reason != "closing":
            self.rejections("http", reason, self._peer())
        if reason == "request_timeout" and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(status_response(408))
        self._closed = True
        self.transport.close()

    def _arm(self, seconds: float, reason: str) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expire, reason)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "?"
