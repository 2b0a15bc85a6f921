"""GET /metrics, served one way by every routelake process: prometheus_client's WSGI app over
a registry, which negotiates the format (Prometheus text or OpenMetrics, gzip) and honours
`name[]` filters.

The streaming job serves it with prometheus_client's own HTTP server (`start_http_server`,
in a daemon thread); the lookup and the collector route `/metrics` of their FastAPI app to the
same WSGI app (`add_metrics_route`), run in a thread so that collectors which walk a new
snapshot, or read the worker processes' files, never hold up the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import make_wsgi_app, start_http_server
from prometheus_client.registry import Collector

if TYPE_CHECKING:  # the streaming job serves metrics without FastAPI: imported when routed
    from fastapi import FastAPI, Request, Response

METRICS_PATH = "/metrics"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def start_metrics_server(registry: Collector, port: int, host: str) -> WSGIServer:
    """Serve `registry` on host:port in a daemon thread; `shutdown()` and `server_close()`
    stop it."""
    server, _thread = start_http_server(port, host, registry)
    return server


def add_metrics_route(app: FastAPI, registry: Collector) -> None:
    """GET /metrics of `app`: the exposition of `registry`."""
    from fastapi import Response

    wsgi = make_wsgi_app(registry)

    async def metrics(request: Request) -> Response:
        status, headers, body = await asyncio.to_thread(_call, wsgi, request)
        return Response(body, status_code=status, headers=headers)

    # a plain Starlette route: the request as is, no parameters for FastAPI to resolve
    app.add_route(METRICS_PATH, metrics, methods=["GET"], include_in_schema=False)


def _call(wsgi: WsgiApp, request: Request) -> tuple[int, dict[str, str], bytes]:
    """One GET through the WSGI app: what it reads of the request, what it answers."""
    answered: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answered["status"], answered["headers"] = int(status.split()[0]), dict(headers)

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": request.url.path,
        "QUERY_STRING": request.url.query,
        "HTTP_ACCEPT": request.headers.get("accept", ""),
        "HTTP_ACCEPT_ENCODING": request.headers.get("accept-encoding", ""),
    }
    body = b"".join(wsgi(environ, start_response))
    return answered["status"], answered["headers"], body
