"""The console's HTTP side, added to the lookup's FastAPI app: the page (`/`, one HTML, one
script, one style sheet shipped in the package) and its JSON under /console/api/.

Every answer is built from one snapshot (snapshot.py) in a worker thread, so delta-rs reads
and index builds never stall the event loop the remoting clients share, and names the
snapshot it shows. The page is read-only, and its Content-Security-Policy allows scripts and
styles from this origin only: no inline script can run, whatever a broker names itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from fastapi import FastAPI, Query, Response
from fastapi.responses import JSONResponse

from routing_lib.console import timelines, timing
from routing_lib.console.snapshot import Console, Snapshot, TimeOutOfRange
from routing_lib.core.admin import ADMIN_EVENTS
from routing_lib.core.tables import DEAD_LETTER, LATE_EVENT, Row
from routing_lib.lookup.refresher import SnapshotHolder
from routing_lib.lookup.route_risk import RouteRisks

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC = {  # URL path -> (package file, media type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console/console.css": ("console.css", "text/css; charset=utf-8"),
}
SEARCH_LIMIT = 100
CHANGES_LIMIT = 500
LATEST = 50
RAW_CHARS = 1000
RISK_LIST = 200  # topics listed per cluster and risk (the counts are whole)
NO_DATA = (
    "No data yet: the warehouse has no published batch. Start the job (`routectl run`) or "
    "load archives (`routectl backfill`); this page shows the fleet once a batch is published. "
    "If one was published, the service's log says why the warehouse could not be read."
)

JsonObj = dict[str, Any]


def _json(payload: JsonObj, status: int = 200) -> JSONResponse:
    return JSONResponse(payload, status_code=status, headers=SECURITY_HEADERS)


def _static(name: str, media_type: str) -> Callable[[], Any]:
    body = resources.files("routing_lib.console").joinpath("static", name).read_bytes()

    async def handler() -> Response:
        return Response(body, media_type=media_type, headers=SECURITY_HEADERS)

    return handler


def add_console(
    app: FastAPI, holder: SnapshotHolder, warehouse: str | Path, route_risks: RouteRisks
) -> Console:
    """The console's routes on `app`; the caller runs the returned console's keep_warm.
    `route_risks`: the lookup's, so the health view lists the topics its gauges count."""
    console = Console(holder, warehouse)
    for path, (name, media_type) in STATIC.items():
        app.add_api_route(path, _static(name, media_type), methods=["GET"], include_in_schema=False)

    async def answer(build: Callable[[Snapshot], JsonObj]) -> JSONResponse:
        def respond() -> JSONResponse:
            snapshot = console.snapshot()
            if snapshot is None:
                return _json({"status": "empty", "message": NO_DATA})
            try:
                payload = build(snapshot)
            except TimeOutOfRange as exc:
                return _json({"status": "error", "message": str(exc)}, 400)
            return _json({"status": "ok", "snapshot": snapshot.info(), **payload})

        def run() -> JSONResponse:
            with timing.tally() as spent:
                response = respond()
            response.headers["Server-Timing"] = spent.header()
            return response

        return await asyncio.to_thread(run)

    @app.get("/console/api/fleet", include_in_schema=False)
    async def fleet(at: int | None = None) -> Response:
        def build(s: Snapshot) -> JsonObj:
            data = s.fleet() if at is None else s.at(at).fleet
            return {"at": at, "fleet": data}

        return await answer(build)

    @app.get("/console/api/topics", include_in_schema=False)
    async def topics(q: str = Query("", max_length=256), at: int | None = None) -> Response:
        def build(s: Snapshot) -> JsonObj:
            names = s.names() if at is None else s.at(at).names
            found = names.search(q, SEARCH_LIMIT)
            return {
                "at": at,
                "query": q,
                "total": len(names),
                "topics": found.names,
                "prefixCount": found.prefix_count,
                "more": found.more,
            }

        return await answer(build)

    @app.get("/console/api/route", include_in_schema=False)
    async def route(topic: str = Query(..., max_length=1024), at: int | None = None) -> Response:
        def build(s: Snapshot) -> JsonObj:
            return {
                "at": at,
                "topic": topic,
                # GET_ROUTEINFO_BY_TOPIC's TopicRouteData, now or at T
                "route": s.index.route(topic) if at is None else s.at(at).route(topic),
                "timeline": timelines.route_versions(s.topic_rows(topic)),
            }

        return await answer(build)

    @app.get("/console/api/broker", include_in_schema=False)
    async def broker(name: str = Query(..., max_length=1024)) -> Response:
        def build(s: Snapshot) -> JsonObj:
            members, events = s.broker_rows(name)
            return {
                "name": name,
                "membership": timelines.membership(members),
                "liveness": timelines.liveness_intervals(events),
            }

        return await answer(build)

    @app.get("/console/api/changes", include_in_schema=False)
    async def changes(
        start: int | None = Query(None, alias="from"),
        end: int | None = Query(None, alias="to"),
        broker: str = Query("", max_length=256),
        topic: str = Query("", max_length=256),
    ) -> Response:
        def build(s: Snapshot) -> JsonObj:
            rows = _admin_rows(s, start, end, broker, topic)
            return {"total": len(rows), "changes": rows[-CHANGES_LIMIT:]}

        return await answer(build)

    @app.get("/console/api/health", include_in_schema=False)
    async def health() -> Response:
        return await answer(lambda s: {**_health(s), "routeRisks": _route_risks(s, route_risks)})

    return console


def _admin_rows(
    s: Snapshot, start: int | None, end: int | None, broker: str, topic: str
) -> list[Row]:
    """admin_events in [start, end) by event time, whose broker / topic contain the given
    texts (case-folded), ordered like `routectl history admin`."""
    rows = s.rows(ADMIN_EVENTS)
    broker, topic = broker.casefold(), topic.casefold()

    def wanted(r: Row) -> bool:
        return (
            (start is None or r["event_time"] >= start)
            and (end is None or r["event_time"] < end)
            and (not broker or broker in (r["broker_name"] or "").casefold())
            and (not topic or topic in (r["topic"] or "").casefold())
        )

    kept = [{k: v for k, v in r.items() if k != "event_date"} for r in rows if wanted(r)]
    return sorted(kept, key=lambda r: (r["event_time"], r["source"] or "", r["position"] or 0))


def _route_risks(s: Snapshot, risks: RouteRisks) -> JsonObj:
    """The served tables' topics without a writable queue and on a single broker group, per
    cluster (the lookup's routelake_routes_* gauges count the same), at most RISK_LIST each."""
    risk = risks.of(s.index)

    def listed(per_cluster: Mapping[str, tuple[str, ...]]) -> JsonObj:
        return {
            "total": len({t for topics in per_cluster.values() for t in topics}),
            "clusters": {c: list(topics[:RISK_LIST]) for c, topics in per_cluster.items()},
            "counts": {c: len(topics) for c, topics in per_cluster.items()},
        }

    return {
        "withoutWritableQueue": listed(risk.without_writable),
        "singleBrokerGroup": listed(risk.single_group),
        "liveBrokers": dict(risk.live_brokers),
    }


def _health(s: Snapshot) -> JsonObj:
    """Dead letters and late events: counts over processing time and the latest ones."""
    dead = s.table(DEAD_LETTER)
    late = s.table(LATE_EVENT)
    seen = [
        t
        for data in (dead, late)
        if data is not None and data.num_rows
        for t in (pc.min(data["seen_at_ms"]).as_py(), pc.max(data["seen_at_ms"]).as_py())
    ]
    start, end = (min(seen), max(seen)) if seen else (0, 0)

    def part(data: Any, columns: list[str]) -> JsonObj:
        if data is None or not data.num_rows:
            return {"total": 0, "buckets": [], "latest": [], "reasons": {}}
        times = data["seen_at_ms"].to_pylist()
        order = pc.sort_indices(data, sort_keys=[("seen_at_ms", "descending")])
        latest = data.take(order[:LATEST]).select(columns).to_pylist()
        for row in latest:  # a dead letter keeps up to 4 KiB of its record: the page shows less
            if row.get("raw_text"):
                row["raw_text"] = row["raw_text"][:RAW_CHARS]
        reasons: dict[str, int] = {}
        if "reason" in data.column_names:
            for reason in data["reason"].to_pylist():
                reasons[reason] = reasons.get(reason, 0) + 1
        return {
            "total": data.num_rows,
            "buckets": timelines.buckets(times, start, end),
            "latest": latest,
            "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:20]),
        }

    return {
        "deadLetters": part(dead, ["seen_at_ms", "reason", "source", "position", "raw_text"]),
        "lateEvents": part(
            late,
            [
                "seen_at_ms",
                "event_time",
                "broker_name",
                "event_type",
                "published_watermark",
                "source",
                "position",
            ],
        ),
    }
