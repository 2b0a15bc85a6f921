"""Limits of the lookup's listeners, and how refused input is counted and logged.

The defaults equal conf/routelake.toml [serve] (a test keeps them in step); `routectl serve`
reads them from there. Memory per connection is bounded by these values, so all connections
together are bounded by max_connections times that (docs/lookup.md "Limits").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from routing_lib.remoting.frames import DEFAULT_MAX_FRAME_BYTES, LOOKUP_MAX_FRAME_BYTES

if TYPE_CHECKING:  # metrics -> routes -> topics -> limits: type names only here
    from routing_lib.config import ServeConfig
    from routing_lib.remoting.service_metrics import Metrics

ECHO_CHARS = 64  # client input quoted back in an error: at most this much, plus its length
LOG_INTERVAL_S = 10.0  # one warning per (listener, reason) per interval, with a count
# HTTP/1.1 pipelining: requests queued behind the one being answered. Clients pipeline a
# few at most; a deeper queue only costs memory (uvicorn parses a whole read at once).
HTTP_MAX_PIPELINED = 16


@dataclass(frozen=True)
class Limits:
    max_frame_bytes: int = LOOKUP_MAX_FRAME_BYTES
    # Reserved for the collector (REGISTER_BROKER bodies reach a few MB); serve ignores it.
    collector_max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_connections: int = 1024  # per listener
    request_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
    http_keepalive_timeout_s: float = 5.0
    http_max_request_line_bytes: int = 8192
    http_max_header_bytes: int = 16384
    http_max_headers: int = 100
    http_max_body_bytes: int = 65536

    def __post_init__(self) -> None:
        if self.max_frame_bytes < 8 or self.collector_max_frame_bytes < 8:
            raise ValueError("frame limits must be at least 8 bytes")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if min(self.request_timeout_s, self.idle_timeout_s, self.http_keepalive_timeout_s) <= 0:
            raise ValueError("timeouts must be positive")
        if self.http_max_request_line_bytes > self.http_max_header_bytes:
            raise ValueError("http_max_request_line_bytes exceeds http_max_header_bytes")

    @classmethod
    def from_config(cls, serve: ServeConfig) -> Limits:
        return cls(**{f.name: getattr(serve, f.name) for f in fields(cls)})


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """`text`, or its first `limit` characters and its length: what an error may echo."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class ThrottledLog:
    """At most one line per key per interval; the next line says how many were held back."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[object, float] = {}
        self._held: dict[object, int] = {}

    def log(self, key: object, level: int, msg: str, *args: object, exc_info: bool = False) -> None:
        if not self.logger.isEnabledFor(level):
            return
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        if held:
            msg += f" (and {held} more like it in the last {self.interval_s:.0f}s)"
        self._last[key] = now
        self.logger.log(level, msg, *args, exc_info=exc_info)


class Rejections:
    """Refused input: counted per (listener, reason) for /metrics, logged rate-limited."""

    QUIET = frozenset({"idle_timeout"})  # normal client behaviour: counted, logged at debug

    def __init__(self, metrics: Metrics, logger: logging.Logger) -> None:
        self.metrics = metrics
        self.log = ThrottledLog(logger)

    def __call__(self, listener: str, reason: str, peer: object, detail: str = "") -> None:
        self.metrics.reject(listener, reason)
        level = logging.DEBUG if reason in self.QUIET else logging.WARNING
        self.log.log(
            (listener, reason),
            level,
            "%s: closing connection from %s: %s%s",
            listener,
            peer,
            reason,
            f" ({detail})" if detail else "",
        )
