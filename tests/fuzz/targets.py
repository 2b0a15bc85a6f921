"""Fuzz targets (atheris) for every decoder that takes bytes from outside.

Each target takes one input and checks: the decoder gives a value or its documented error,
never another exception; what it gives is usable downstream (a decoded request gets an answer
that encodes, a collector's event goes through stage one without an internal error, an HTTP
answer is never a 5xx). Hangs and allocation are bounded by libFuzzer's -timeout and
-rss_limit_mb (tests/fuzz/run.py sets both).

Targets:
- remoting_frames: the remoting frame decoder (FrameDecoder, fed in pieces; decode)
- lookup_requests: the lookup's request headers -> answer (lookup/processor.py)
- collector_requests: brokers' and operators' requests, headers and bodies (collector codec)
- event_json: stage one's event decoder (ingest.classify, schemas.parse_event)
- lookup_http: the lookup's HTTP paths and query parameters (FastAPI app, in-process ASGI)
- console_http: the console's HTTP query parameters (same app, with a warehouse)
- content_refs: content references (core/content.py is_ref, resolve) and the packed wire form

Run one: `.venv/bin/python -m tests.fuzz.run TARGET [libFuzzer options]`
(scripts/fuzz.sh runs them all; tests/fuzz/test_fuzz.py runs each briefly in CI).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import shutil
import tempfile
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes, unquote

from routing_lib.collector.admin_events import admin_event
from routing_lib.collector.broker_events import (
    BrokerRequestError,
    encode_event,
    identity,
    query_data_version,
    register_event,
)
from routing_lib.core.content import (
    MANIFEST_MARK,
    REF_MARK,
    ContentStore,
    MissingContentError,
    is_opens_value,
    is_ref,
)
from routing_lib.core.wire import LazyTopicTable, inline, topics_ref, unpack_event
from routing_lib.ingest import DEAD_LETTER_KEY, TICK_KEY, classify
from routing_lib.lookup.processor import answer
from routing_lib.lookup.refresher import Served, SnapshotHolder
from routing_lib.lookup.routes import RouteIndex
from routing_lib.remoting.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    LOOKUP_MAX_FRAME_BYTES,
    FrameDecoder,
    RemotingCodecError,
    RemotingCommand,
    SerializeType,
    decode,
    encode,
)
from routing_lib.remoting.protocol import ADMIN_CODES, BROKER_CODES, READ_CODES, RequestCode
from schemas.route_event import ValidationFailure, parse_event

Target = Callable[[bytes], None]
INTERNAL = "internal error"


# -- remoting frames --------------------------------------------------------------------------

_LIMITS = (8, 64, LOOKUP_MAX_FRAME_BYTES, DEFAULT_MAX_FRAME_BYTES)


def _decode_frames(data: bytes, limit: int, piece: int) -> list[RemotingCommand]:
    """FrameDecoder fed `data` in pieces of `piece` bytes: the commands before an error."""
    decoder = FrameDecoder(limit)
    commands: list[RemotingCommand] = []
    try:
        for start in range(0, len(data), piece):
            commands += decoder.feed(data[start : start + piece])
            assert decoder.buffered < limit  # never more than one frame's bytes held
        if decoder.error is not None:
            decoder.feed(b"")
            raise AssertionError("a failed decoder must raise on the next feed")
    except RemotingCodecError:
        assert decoder.buffered == 0  # nothing after a bad frame is kept
    return commands


def remoting_frames(data: bytes) -> None:
    if not data:
        return
    limit, piece = _LIMITS[data[0] & 3], 1 + (data[0] >> 2)
    commands = _decode_frames(data[1:], limit, piece)
    for command in commands:
        assert command.frame_bytes <= limit
        # a decoded command encodes again, and decodes to the same fields
        again = decode(encode(command))
        for name in ("code", "version", "opaque", "flag", "body", "serialize_type"):
            assert getattr(again, name) == getattr(command, name), name
    try:
        whole = decode(data[1:])
    except RemotingCodecError:
        return
    assert whole.frame_bytes == len(data) - 1


# -- requests: shared parts -------------------------------------------------------------------

_EXT_KEYS = (
    "topic",
    "namespace",
    "key",
    "value",
    "cluster",
    "clusterName",
    "brokerName",
    "brokerAddr",
    "brokerId",
    "haServerAddr",
    "heartbeatTimeoutMillis",
    "enableActingMaster",
    "compressed",
    "bodyCrc32",
    "acceptStandardJsonOnly",
    "__ZONE_NAME",
)


def _structured_request(data: bytes, codes: list[int]) -> RemotingCommand:
    """A request built from the input: byte 0 picks the code, byte 1 the version and flag,
    then NUL-separated extFields values (keys from _EXT_KEYS by a leading byte), and what
    follows a 0xFF 0xFF mark is the body."""
    head, _, body = data[2:].partition(b"\xff\xff")
    ext: dict[str, str] = {}
    for field in head.split(b"\x00"):
        if field:
            ext[_EXT_KEYS[field[0] % len(_EXT_KEYS)]] = field[1:].decode("utf-8", "replace")
    versions = (0, 317, 373, 399, 415, 471, 2**31 - 1)  # V4_9_4 is 399, V5_0_0 is 415
    flags = (0, 1, 2, 3)
    return RemotingCommand(
        code=codes[data[0] % len(codes)],
        version=versions[data[1] % len(versions)],
        flag=flags[(data[1] >> 4) % len(flags)],
        opaque=data[1],
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType(data[1] >> 7),
    )


def _requests(data: bytes, codes: list[int], limit: int) -> list[RemotingCommand]:
    """Byte 0 even: the input is frames on the wire; odd: a structured request."""
    if len(data) < 3:
        return []
    if data[0] & 1:
        return [_structured_request(data[1:], codes)]
    return _decode_frames(data[1:], limit, 1 + (data[0] >> 1))


# -- the lookup's requests --------------------------------------------------------------------


@cache
def _route_index() -> RouteIndex:
    """The golden random fleet and the KV fixture, through the plain replay."""
    from routing_lib.core.replay import default_watermark, fleet_rows, replay
    from routing_lib.read.warehouse import WarehouseSnapshot

    golden = Path(__file__).resolve().parents[1] / "golden"
    events = []
    for fixture in ("20_random_fleet_seed101", "16_kv_config_admin"):
        lines = (golden / fixture / "events.jsonl").read_text().splitlines()
        events += [parse_event(line) for line in lines]
    until = default_watermark(events, 10_000)
    tables = fleet_rows(replay(events, until).values())
    return RouteIndex(WarehouseSnapshot(tables, {}, until))


def lookup_requests(data: bytes) -> None:
    index = _route_index()
    for request in _requests(data, sorted(READ_CODES), LOOKUP_MAX_FRAME_BYTES):
        response = answer(index, request)
        if response is None:
            assert request.is_response or request.is_oneway
            continue
        assert response.is_response and response.opaque == request.opaque
        encode(response)  # every answer can be sent


# -- the collector's requests -----------------------------------------------------------------

_COLLECTOR_CODES = sorted(BROKER_CODES | ADMIN_CODES - {RequestCode.REGISTER_TOPIC_IN_NAMESRV})
_EVENT_TIME = 1_764_000_000_000
# a body may inflate to this much here (the collector's default is 256 MiB): bounds the RSS
_MAX_INFLATED = 16 * 1024 * 1024


def _compressed_variant(request: RemotingCommand) -> RemotingCommand:
    """A REGISTER_BROKER whose body is zlib-compressed as brokers send it: the fuzzer reaches
    the inflated form's parser without having to produce a valid zlib stream itself."""
    ext = dict(request.ext_fields)
    ext["compressed"] = "true"
    ext.pop("bodyCrc32", None)
    return RemotingCommand(
        code=request.code,
        version=request.version,
        ext_fields=ext,
        body=zlib.compress(request.body),
    )


def _collector_event(request: RemotingCommand) -> dict[str, Any] | None:
    try:
        if request.code == RequestCode.REGISTER_BROKER:
            return register_event(request, _EVENT_TIME, _MAX_INFLATED)[1]
        if request.code in ADMIN_CODES:
            return admin_event(request, _EVENT_TIME, "127.0.0.1:1")
        event = identity(request).event("HEARTBEAT", _EVENT_TIME)
        if request.code == RequestCode.QUERY_DATA_VERSION:
            query_data_version(request)
        return event
    except BrokerRequestError:
        return None


def collector_requests(data: bytes) -> None:
    requests = _requests(data, _COLLECTOR_CODES, DEFAULT_MAX_FRAME_BYTES)
    if data and data[0] & 2 and requests and requests[0].code == RequestCode.REGISTER_BROKER:
        requests.append(_compressed_variant(requests[0]))
    for request in requests:
        event = _collector_event(request)
        if event is None:
            continue
        # what the collector publishes, stage one takes: an event or a dead letter with a
        # reason, never an internal error
        record = classify(encode_event(event), "fuzz-0", 0, None, 0)
        assert not (record.reason or "").startswith(INTERNAL), record.reason


# -- stage one's event decoder ----------------------------------------------------------------


def event_json(data: bytes) -> None:
    first = classify(data, "fuzz-0", 1, None, 0)
    assert not (first.reason or "").startswith(INTERNAL), first.reason
    try:
        event = parse_event(data)
    except ValidationFailure:
        event = None
    accepted = first.group_key != DEAD_LETTER_KEY
    assert accepted == (event is not None), (first.reason, event)
    # the same bytes again: stage one's template shortcut must give the same verdict
    again = classify(data, "fuzz-0", 2, None, 0)
    assert (again.group_key, again.event_time, again.payload, again.reason) == (
        first.group_key,
        first.event_time,
        first.payload,
        first.reason,
    )
    if event is None or first.group_key == TICK_KEY:
        return
    assert first.event_time == event.eventTime
    assert first.payload is not None
    unpacked = unpack_event(first.payload)
    assert unpacked.eventType == event.eventType and unpacked.eventTime == event.eventTime


# -- HTTP: the lookup's API and the console ---------------------------------------------------

# URL bytes a client may send unescaped (RFC 3986 path and query characters); everything
# else arrives percent-encoded, as HTTP clients send it
_URL_SAFE = b"!$&'()*+,;=:@/?-._~%"


class _App:
    """The lookup's FastAPI app with a served snapshot, called in-process over ASGI."""

    def __init__(self, console: bool) -> None:
        from routing_lib.lookup.server import create_app
        from routing_lib.remoting.service_metrics import Metrics

        self.loop = asyncio.new_event_loop()
        holder = SnapshotHolder()
        warehouse = _warehouse() if console else None
        if warehouse is None:
            holder.current = Served.of(_route_index())
        else:
            from routing_lib.read.warehouse import load_snapshot

            holder.current = Served.of(RouteIndex(load_snapshot(warehouse)))
        self.app = create_app(holder, Metrics(), warehouse)

    def get(self, target: bytes) -> tuple[int, dict[str, str], bytes]:
        raw_path, _, query = target.partition(b"?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": unquote(raw_path.decode("ascii")),  # as uvicorn builds it
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": [(b"host", b"fuzz")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        self.loop.run_until_complete(self.app(scope, receive, send))
        start = next(m for m in sent if m["type"] == "http.response.start")
        headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], headers, body


@cache
def _warehouse() -> str:
    """A warehouse written with delta-rs as the job commits (route tables, then progress)."""
    from tests.support.lookup_support import Warehouse, fixture_tables

    root = Path(tempfile.mkdtemp(prefix="routelake-fuzz-"))
    atexit.register(shutil.rmtree, root, True)
    tables, watermark = fixture_tables()
    Warehouse(root).publish(0, watermark, tables)
    return str(root)


@cache
def _app(console: bool) -> _App:
    return _App(console)


def _http(data: bytes, prefixes: tuple[bytes, ...], console: bool) -> None:
    if not data:
        return
    target = prefixes[data[0] % len(prefixes)] + quote_from_bytes(data[1:], _URL_SAFE).encode()
    status, headers, body = _app(console).get(target)
    assert status < 500, (target, status, body[:500])
    if headers.get("content-type", "").startswith("application/json"):
        json.loads(body)


LOOKUP_PATHS = (
    b"/topics/",
    b"/topics/TopicTest/route?",
    b"/clusters/",
    b"/kv/",
    b"/kv/ORDER_TOPIC_CONFIG/",
    b"/",
)
CONSOLE_PATHS = (
    b"/console/api/topics?q=",
    b"/console/api/topics?at=",
    b"/console/api/route?topic=",
    b"/console/api/route?topic=TopicTest&at=",
    b"/console/api/fleet?at=",
    b"/console/api/broker?name=",
    b"/console/api/changes?from=",
    b"/console/api/changes?to=1&broker=",
    b"/console/api/",
)


def lookup_http(data: bytes) -> None:
    _http(data, LOOKUP_PATHS, console=False)


def console_http(data: bytes) -> None:
    _http(data, CONSOLE_PATHS, console=True)


# -- content references and the packed wire form ----------------------------------------------


def content_refs(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    assert is_ref(text) == (len(text) == 33 and text[0] in (REF_MARK, MANIFEST_MARK))
    store = ContentStore(max_bytes=1 << 20)  # a fresh one: nothing pinned across inputs
    ref = store.put(text)
    assert is_ref(ref) and store.get(ref) == text and store.resolve(ref) == text
    try:
        assert store.resolve(text) == text or is_ref(text)
    except MissingContentError:
        assert is_ref(text) or is_opens_value(text)
    # the packed forms: a reference in them is resolved or refused, nothing else
    for packed in (text, f'{{"eventType":"REGISTER"}}\x1e{text}', f"{text}\x1e{ref}"):
        tail = topics_ref(packed)
        assert tail is None or is_ref(tail)
        try:
            inline(packed)
        except MissingContentError:
            assert tail is not None
    try:
        table = LazyTopicTable(text)
    except ValueError:
        assert not is_ref(text)
    else:
        assert table.ref == text
        try:
            table.topic_keys()
        except MissingContentError:
            pass


TARGETS: dict[str, Target] = {
    "remoting_frames": remoting_frames,
    "lookup_requests": lookup_requests,
    "collector_requests": collector_requests,
    "event_json": event_json,
    "lookup_http": lookup_http,
    "console_http": console_http,
    "content_refs": content_refs,
}
