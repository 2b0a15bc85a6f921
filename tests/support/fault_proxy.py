"""An HTTP proxy in front of the test S3 server (moto's, tests/support/s3_support.py) that
injects storage faults: moto answers every request it can, so the faults a real object store
has (503 SlowDown when throttled, 500 InternalError, a connection reset) come from here.

Requests pass through unchanged (the client signed them for the proxy's address, and moto does
not check signatures) unless a fault rule matches: then the proxy answers with the fault
instead of asking moto. A rule matches requests whose URL path (the object key, not the query
string) contains a given text, optionally only some HTTP methods, and fires for the next N
matching requests, or for every one until it is cleared. A hold rule delays the next matching
request until the test releases it (a race between two clients, played in a chosen order), and
every request the server answered is recorded (`answered`). Threaded and stdlib only.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

RESET = "reset"  # close the connection without an answer (TCP RST)
_ERROR_CODES = {500: "InternalError", 503: "SlowDown"}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}
HOLD_LIMIT_S = 30.0  # a held request goes on by itself after this long (a test that forgot it)


@dataclass
class FaultRule:
    path_contains: str
    fault: int | str  # an HTTP status (500, 503) or RESET
    methods: frozenset[str] | None = None  # None: every method
    remaining: int | None = None  # None: every matching request until cleared
    injected: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (
            self.path_contains in path
            and (self.methods is None or method in self.methods)
            and (self.remaining is None or self.remaining > 0)
        )


@dataclass
class HoldRule:
    """Holds the next request whose path contains `path_contains` (one of `methods`) until
    `release()`; `arrived` is set when that request reaches the proxy."""

    path_contains: str
    methods: frozenset[str]
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    taken: bool = False

    def release(self) -> None:
        self.released.set()


@dataclass
class FaultProxy:
    upstream: str  # http://host:port of the real server
    host: str = "127.0.0.1"
    rules: list[FaultRule] = field(default_factory=list)
    holds: list[HoldRule] = field(default_factory=list)
    answered: list[tuple[str, str]] = field(default_factory=list)  # (method, path), in order
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def fail(
        self,
        path_contains: str,
        fault: int | str,
        times: int | None,
        methods: tuple[str, ...] | None = None,
    ) -> FaultRule:
        """Answer the next `times` matching requests (None: all of them) with `fault`."""
        rule = FaultRule(path_contains, fault, frozenset(methods) if methods else None, times)
        with self._lock:
            self.rules.append(rule)
        return rule

    def hold(self, path_contains: str, methods: tuple[str, ...]) -> HoldRule:
        """Delay the next matching request until the returned rule is released."""
        rule = HoldRule(path_contains, frozenset(methods))
        with self._lock:
            self.holds.append(rule)
        return rule

    def answered_count(self, method: str, path_contains: str) -> int:
        with self._lock:
            return sum(1 for m, path in self.answered if m == method and path_contains in path)

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            for rule in self.holds:
                rule.release()
            self.holds.clear()

    def _hold_if_asked(self, method: str, path: str) -> None:
        with self._lock:
            rule = next(
                (
                    r
                    for r in self.holds
                    if not r.taken and method in r.methods and r.path_contains in path
                ),
                None,
            )
            if rule is not None:
                rule.taken = True
        if rule is not None:
            rule.arrived.set()
            rule.released.wait(HOLD_LIMIT_S)

    def _fault_for(self, method: str, path: str) -> int | str | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    rule.injected += 1
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    return rule.fault
            return None

    def start(self) -> None:
        proxy = self
        upstream = urlsplit(self.upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue as clients expect

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                path = urlsplit(self.path).path
                fault = proxy._fault_for(self.command, path)
                if fault == RESET:
                    # SO_LINGER 0: close() sends a reset, as a dropped connection does
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    return
                if fault is not None:
                    assert isinstance(fault, int)
                    self._answer(fault, [("Content-Type", "application/xml")], _error(fault))
                    return
                proxy._hold_if_asked(self.command, path)
                connection = http.client.HTTPConnection(upstream.netloc, timeout=60)
                try:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP
                    }
                    headers.pop("Expect", None)
                    headers["Content-Length"] = str(len(body))
                    connection.request(self.command, self.path, body, headers)
                    answer = connection.getresponse()
                    data = answer.read()
                    with proxy._lock:
                        proxy.answered.append((self.command, path))
                    kept = [
                        (k, v)
                        for k, v in answer.getheaders()
                        if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
                    ]
                    length = answer.getheader("Content-Length") if self.command == "HEAD" else None
                    self._answer(answer.status, kept, data, length)
                finally:
                    connection.close()

            def _answer(
                self,
                status: int,
                headers: list[tuple[str, str]],
                data: bytes,
                length: str | None = None,
            ) -> None:
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _error(status: int) -> bytes:
    code = _ERROR_CODES.get(status, "InternalError")
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>injected by the test proxy</Message></Error>"
    ).encode()


@contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
