"""Hostile input against the lookup's two listeners: every probe that once broke
them, replayed as bytes over raw sockets against `serve()` running in a subprocess (so its
RSS is measurable and "alive" means the process), plus a seeded random-frame fuzz.

After every test: the process is alive, a valid request is answered on both listeners, and
its log has no traceback. Timeouts are shortened for the tests (TEST_LIMITS); sizes are the
production defaults.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from routing_lib.config import load_config
from routing_lib.remoting.frames import (
    FrameDecoder,
    MalformedFrameError,
    RemotingCodecError,
    RemotingCommand,
    SerializeType,
    decode,
    encode,
)
from routing_lib.remoting.limits import Limits, ThrottledLog, clip
from routing_lib.remoting.protocol import NAMESRV_VERSION, RequestCode, ResponseCode
from tests.support.lookup_support import ServerThread, Warehouse, tables, wait_until
from tests.support.metrics_support import sample

REPO = Path(__file__).parent.parent
TEST_LIMITS = Limits(
    max_connections=64, request_timeout_s=1.5, idle_timeout_s=2.5, http_keepalive_timeout_s=1.5
)
# A probe that once killed the connection: code 105, extFields {"topic": "\ud800"} (a lone
# surrogate, which JSON allows and UTF-8 cannot encode).
SURROGATE_FRAME = bytes.fromhex(
    "0000003a000000367b22636f6465223a3130352c226f7061717565223a312c226578744669656c6473223a"
    "7b22746f706963223a225c7564383030227d7d"
)
GET_ROUTE = b"GET /topics/Orders/route HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


# -- the server under test --


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    port: int
    http_port: int
    log_path: Path
    warehouse: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024


def _start(warehouse: Path, log_path: Path) -> ServerProcess:
    code = (
        "from routing_lib.remoting.limits import Limits\n"
        "from routing_lib.lookup.server import serve\n"
        f"serve({str(warehouse)!r}, 0, 0, 0.2, {TEST_LIMITS.max_frame_bytes}, False,"
        f" limits=Limits(**{dataclasses.asdict(TEST_LIMITS)!r}))\n"
    )
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stderr=log, cwd=REPO, stdin=subprocess.DEVNULL
        )
    deadline = time.monotonic() + 60
    while "- ready" not in log_path.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.05)
    ports = re.search(
        r"remoting on 127\.0\.0\.1:(\d+), http on 127\.0\.0\.1:(\d+)", log_path.read_text()
    )
    return ServerProcess(proc, int(ports[1]), int(ports[2]), log_path, warehouse)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("hostile")
    Warehouse(root / "warehouse").publish(0, 1_764_000_050_000, tables())
    process = _start(root / "warehouse", root / "serve.log")
    try:
        yield process
    finally:
        process.proc.send_signal(signal.SIGTERM)
        try:
            process.proc.wait(15)
        except subprocess.TimeoutExpired:
            process.proc.kill()
            process.proc.wait()


@pytest.fixture(autouse=True)
def still_healthy(server: ServerProcess) -> Iterator[None]:
    yield
    assert server.proc.poll() is None, "the server process died"
    assert route_ok(server.port) and http_status(http(server.http_port, GET_ROUTE)) == 200
    log = server.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


# -- clients --


def request(code: int = 105, opaque: int = 1, **ext: str) -> bytes:
    return encode(
        RemotingCommand(code=code, version=NAMESRV_VERSION, opaque=opaque, ext_fields=ext)
    )


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_until_eof(sock: socket.socket, timeout: float = 5.0) -> tuple[bytes, bool]:
    """(bytes read, whether the server closed) within `timeout`."""
    sock.settimeout(timeout)
    data = bytearray()
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        return bytes(data), False
    except ConnectionResetError:
        pass
    return bytes(data), True


def exchange(port: int, data: bytes, timeout: float = 5.0) -> tuple[list[RemotingCommand], bool]:
    """Send `data`, half-close, read to EOF: (answers, server closed)."""
    with connect(port) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # refused mid-send: what was answered is still readable
        raw, closed = read_until_eof(sock, timeout)
    decoder = FrameDecoder()
    return decoder.feed(raw), closed


def answers(sock: socket.socket, count: int) -> list[RemotingCommand]:
    decoder, out = FrameDecoder(), []
    while len(out) < count:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        out += decoder.feed(chunk)
    return out


def route_ok(port: int) -> bool:
    replies, _ = exchange(port, request(topic="Orders", opaque=7))
    return [(r.opaque, r.code) for r in replies] == [(7, ResponseCode.SUCCESS)]


def http(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with connect(port) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass
        return read_until_eof(sock, timeout)[0]


def http_status(raw: bytes) -> int | None:
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", raw)
    return int(match[1]) if match else None


def metrics(server: ServerProcess) -> str:
    raw = http(server.http_port, b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    return raw.partition(b"\r\n\r\n")[2].decode()


FRAME_ERRORS = "routelake_lookup_frame_errors_total"


def metric(server: ServerProcess, name: str, **labels: str) -> int:
    return int(sample(metrics(server), name, **labels) or 0)


def assert_no_leak(raw: bytes, server: ServerProcess) -> None:
    for secret in (str(server.warehouse).encode(), b"Traceback", b"Error:", b"uvicorn"):
        assert secret not in raw


# -- 12.1 lone surrogate, 12.2 frames before a bad one --


def test_lone_surrogate_topic_is_answered_and_the_connection_kept(server):
    with connect(server.port) as sock:
        sock.sendall(SURROGATE_FRAME + request(topic="Orders", opaque=2))
        bad, good = answers(sock, 2)
        assert (bad.opaque, bad.code) == (1, ResponseCode.INVALID_PARAMETER)
        assert "illegal characters" in bad.remark and "?" in bad.remark  # Java writes '?'
        assert (good.opaque, good.code) == (2, ResponseCode.SUCCESS)
        sock.sendall(request(topic="Orders", opaque=3))
        assert answers(sock, 1)[0].code == ResponseCode.SUCCESS


def test_requests_before_a_bad_frame_are_answered_then_closed(server):
    data = (
        request(topic="Orders", opaque=1)
        + request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=2)
        + b"\xff\xff\xff\xfb"
    )
    replies, closed = exchange(server.port, data + request(topic="Orders", opaque=3))
    assert [(r.opaque, r.code) for r in replies] == [(1, 0), (2, 0)] and closed


def test_http_pipeline_depth_is_capped(server):
    get = b"GET /topics HTTP/1.1\r\nHost: t\r\n\r\n"
    raw = http(server.http_port, get * 200)  # one read: uvicorn would queue all 200
    assert 1 <= raw.count(b"HTTP/1.1 200 OK") <= 17  # one answering, 16 queued, then closed
    assert 'reason="pipeline_too_deep"' in metrics(server)


def test_http_requests_before_a_bad_one_are_answered_then_closed(server):
    good = b"GET /topics/Orders/route HTTP/1.1\r\nHost: t\r\n\r\n"
    raw = http(server.http_port, good + good + b"GET /topics \x00HTTP/1.1\r\n\r\n" + good)
    assert raw.count(b"HTTP/1.1 200 OK") == 2 and b"HTTP/1.1 400" not in raw


# -- 12.3 memory: frame, header and connection caps --


def test_oversize_frames_are_refused_at_the_length_prefix(server):
    before = metric(server, FRAME_ERRORS, reason="FrameTooLargeError")
    for claimed in (TEST_LIMITS.max_frame_bytes - 3, 16 << 20, 8 << 20):
        replies, closed = exchange(server.port, struct.pack(">i", claimed) + b"x" * 65536)
        assert replies == [] and closed
    # A request that fits is answered whatever the 8 MB probe of 12.5 would have held.
    fits = request(topic="Orders", pad="p" * (TEST_LIMITS.max_frame_bytes - 200))
    assert len(fits) <= TEST_LIMITS.max_frame_bytes
    assert [r.code for r in exchange(server.port, fits)[0]] == [0]
    after = metric(server, FRAME_ERRORS, reason="FrameTooLargeError")
    assert after - before == 3


@pytest.mark.parametrize(
    "probe, status",
    [
        (b"GET /topics HTTP/1.1\r\nX-Big: " + b"a" * 17_000 + b"\r\n\r\n", 431),
        (b"GET /topics HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431),
        (b"GET /topics/" + b"a" * 9000 + b"/route HTTP/1.1\r\n\r\n", 414),
        (b"GET /topics HTTP/1.1\r\nContent-Length: 70000\r\n\r\n", 413),
    ],
)
def test_http_head_and_body_limits(server, probe, status):
    raw = http(server.http_port, probe)
    assert http_status(raw) == status and len(raw) < 512
    assert b"connection: close" in raw and b"server:" not in raw.lower()


@pytest.mark.parametrize(
    "probe",
    [
        b"GET /topics HTTP/1.1\r\nX-Big: " + b"a" * (32 << 20),  # one 32 MiB header
        b"GET /topics HTTP/1.1\r\n" + b"X-H: v\r\n" * 100_000,  # 100 000 headers
    ],
)
def test_http_giant_heads_are_cut_off(server, probe):
    with connect(server.http_port) as sock:
        sent, view = 0, memoryview(probe)
        try:
            while sent < len(probe):
                sent += sock.send(view[sent : sent + 65536])
        except OSError:
            pass
        raw, closed = read_until_eof(sock)
    assert closed and sent < len(probe) or http_status(raw) == 431
    assert http_status(raw) in (431, None)  # a reset may eat the answer, never a 200


def _hold_remoting(port: int, held: list[socket.socket]) -> None:
    """A frame of exactly the cap, all but its last byte sent: the most one connection
    can make the server buffer."""
    sock = connect(port)
    frame = request(topic="Orders", pad="p" * (TEST_LIMITS.max_frame_bytes - 200))
    frame = frame + b"\x00" * (TEST_LIMITS.max_frame_bytes - len(frame))
    frame = struct.pack(">i", len(frame) - 4) + frame[4:]
    sock.sendall(frame[:-1])
    held.append(sock)


def _hold_http(port: int, held: list[socket.socket]) -> None:
    sock = connect(port)
    sock.sendall(
        b"GET /topics HTTP/1.1\r\nX-Fill: " + b"f" * (TEST_LIMITS.http_max_header_bytes - 200)
    )
    held.append(sock)


def _flood_http_head(port: int) -> None:
    with connect(port) as sock:
        try:  # 1 MiB of one header: cut off at the header limit
            sock.sendall(b"GET / HTTP/1.1\r\nX: " + b"a" * (1 << 20))
        except OSError:
            pass


def test_hostile_connections_cannot_grow_rss_beyond_the_bound(server):
    """Every connection the caps admit holds the most it can (a frame one byte short of
    max_frame_bytes, a head just under http_max_header_bytes), 64 more per listener are
    turned away, and 64 try 1 MiB headers. Bound: the caps' worth of bytes held, times 4 for
    interpreter overhead, plus 16 MiB. Before the caps: 10 connections took 146 MB."""
    for _ in range(3):  # warm up: allocator pools, lazily imported code paths
        _flood_http_head(server.http_port)
        assert route_ok(server.port)
    wait_until(lambda: metric(server, "routelake_lookup_connections") == 0)
    baseline, peak = server.rss_bytes(), 0
    held: list[socket.socket] = []
    try:
        started = time.monotonic()
        for _ in range(TEST_LIMITS.max_connections):
            _hold_remoting(server.port, held)
            _hold_http(server.http_port, held)
        turned_away = [connect(server.port) for _ in range(64)]
        assert all(read_until_eof(sock, 3) == (b"", True) for sock in turned_away)
        turned_away += [connect(server.http_port) for _ in range(64)]
        assert all(http_status(read_until_eof(sock, 3)[0]) == 503 for sock in turned_away[64:])
        # Turned away at once, not by the holders' deadline freeing slots.
        assert time.monotonic() - started < TEST_LIMITS.request_timeout_s
        for sock in turned_away:
            sock.close()
        for _ in range(64):
            _flood_http_head(server.http_port)
        for _ in range(10):
            peak = max(peak, server.rss_bytes())
            time.sleep(0.03)
    finally:
        for sock in held:
            sock.close()
    per_connection = TEST_LIMITS.max_frame_bytes + TEST_LIMITS.http_max_header_bytes
    bound = 4 * TEST_LIMITS.max_connections * per_connection + (16 << 20)
    assert peak - baseline < bound, (peak - baseline, bound)
    text = metrics(server)
    rejected = "routelake_lookup_rejections_total"
    assert sample(text, rejected, listener="remoting", reason="max_connections")
    assert sample(text, rejected, listener="http", reason="max_connections")


# -- 12.4 deadlines --


def test_http_idle_and_slowloris_connections_are_closed(server):
    idle = [connect(server.http_port) for _ in range(20)]
    slow = [connect(server.http_port) for _ in range(20)]
    for sock in slow:
        sock.sendall(b"GET /topics HTTP/1.1\r\nHost: t\r\n")
    started = time.monotonic()
    # One header byte per socket every 0.25 s, for well past the deadline: more bytes do not
    # move it (uvicorn's own timer restarted on every read, so these were never closed).
    while time.monotonic() - started < TEST_LIMITS.request_timeout_s + 2:
        time.sleep(0.25)
        for sock in slow:
            try:
                sock.send(b"X")
            except OSError:
                pass
    results = [read_until_eof(sock, 0.5) for sock in idle + slow]  # closed already
    assert all(closed for _, closed in results)
    assert all(raw == b"" for raw, _ in results[:20])  # idle: closed silently
    assert all(http_status(raw) == 408 for raw, _ in results[20:])  # the request deadline
    for sock in idle + slow:
        sock.close()


def test_remoting_trickled_frame_hits_the_request_deadline(server):
    frame = request(topic="Orders")
    with connect(server.port) as sock:
        started, sent = time.monotonic(), 0
        try:  # one byte per 0.2 s: well inside the idle timeout, never a whole frame in time
            while sent < len(frame) and time.monotonic() - started < 10:
                sock.send(frame[sent : sent + 1])
                sent += 1
                time.sleep(0.2)
        except OSError:
            pass
        raw, closed = read_until_eof(sock, 5)
        elapsed = time.monotonic() - started
    assert closed and raw == b"" and sent < len(frame)
    assert TEST_LIMITS.request_timeout_s - 0.1 < elapsed < TEST_LIMITS.request_timeout_s + 3


def test_remoting_idle_connection_is_closed(server):
    with connect(server.port) as sock:
        started = time.monotonic()
        sock.sendall(request(topic="Orders"))
        assert answers(sock, 1)[0].code == ResponseCode.SUCCESS
        raw, closed = read_until_eof(sock, TEST_LIMITS.idle_timeout_s + 3)
    assert closed and raw == b""
    assert time.monotonic() - started >= TEST_LIMITS.idle_timeout_s - 0.1


def test_remoting_client_that_never_reads_is_closed(server):
    deaf = connect(server.port)
    done = threading.Event()

    def flood() -> None:
        try:
            deaf.sendall(
                request(RequestCode.GET_BROKER_CLUSTER_INFO) * 200_000
            )  # ~22 MB of requests, answers never read
        except OSError:
            pass
        done.set()

    threading.Thread(target=flood, daemon=True).start()
    assert done.wait(TEST_LIMITS.idle_timeout_s + 5)  # the server gave up on it
    deaf.close()
    wait_until(lambda: 'reason="write_timeout"' in metrics(server), 5)


# -- 12.5 echoes, 12.6 leaks --


def test_error_answers_echo_a_clipped_topic(server):
    topic = "x" * 60_000 + "!"
    (reply,), _ = exchange(server.port, request(topic=topic))
    assert reply.code == ResponseCode.INVALID_PARAMETER
    assert len(reply.remark) < 200 and "(60001 chars)" in reply.remark
    close = b" HTTP/1.1\r\nConnection: close\r\n\r\n"
    raw = http(server.http_port, b"GET /topics/" + b"y" * 7000 + b"!/route" + close)
    assert http_status(raw) == 400 and len(raw) < 1024 and b"(7001 chars)" in raw
    raw = http(server.http_port, b"GET /clusters/" + b"c" * 7000 + b"/topics" + close)
    assert http_status(raw) == 404 and len(raw) < 1024


def test_not_ready_answers_name_no_path(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="routelake.lookup")
    with ServerThread(tmp_path / "empty", limits=TEST_LIMITS) as thread:
        port = thread.service.http_port
        wait_until(lambda: thread.service.metrics.refreshes["error"] > 0)
        for path in (b"/readyz", b"/topics/Orders/route", b"/clusters"):
            raw = http(port, b"GET " + path + b" HTTP/1.1\r\nConnection: close\r\n\r\n")
            assert http_status(raw) == 503 and b"no snapshot loaded yet" in raw
            assert str(tmp_path).encode() not in raw and b"WarehouseError" not in raw
            assert b"\r\nserver:" not in raw.lower()
    assert any(str(tmp_path) in r.getMessage() for r in caplog.records)  # detail: log only


# -- 12.7 log flooding --


def test_bad_frames_are_counted_not_logged_one_by_one(server):
    before = metric(server, FRAME_ERRORS, reason="MalformedFrameError")
    log_before = len(server.log_text().splitlines())
    for _ in range(200):
        exchange(server.port, b"\x00\x00\x00\x08\x09\x00\x00\x00garbage!")
    assert metric(server, FRAME_ERRORS, reason="MalformedFrameError") - before == 200
    new_lines = server.log_text().splitlines()[log_before:]
    assert 1 <= len([x for x in new_lines if "MalformedFrame" in x or "serialize" in x]) <= 2


def test_throttled_log_reports_what_it_held_back(caplog):
    clock = [0.0]
    throttled = ThrottledLog(logging.getLogger("t.throttle"), 10.0, lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="t.throttle"):
        for i in range(50):
            clock[0] = i * 0.5  # 25 s: lines at 0, 10, 20
            throttled.log("k", logging.WARNING, "bad %d", i)
    assert [r.getMessage() for r in caplog.records] == [
        "bad 0",
        "bad 20 (and 19 more like it in the last 10s)",
        "bad 40 (and 19 more like it in the last 10s)",
    ]


# -- 12.8 lenient parsing: what RocketMQ 5.3.3's fastjson decoder makes of it --

# Outcomes recorded from org.apache.rocketmq.remoting.protocol.RemotingCommand.decode
# (rocketmq-remoting 5.3.3, fastjson 1.2.83): code and extFields, or None where Java
# accepts something this decoder refuses (refusing is allowed, a different reading is not).
JAVA_DECODES = [
    (b'{"code":null}', 0, {}),
    (b'{"code":-0}', 0, {}),
    (b'{"code":105,"flag":null,"opaque":null,"version":null}', 105, {}),
    (b'{"code":105,"code":106}', 106, {}),
    (
        b'{"code":105,"extFields":{"a":1e400,"b":1.50,"c":1e5,"d":true,"f":-0,'
        b'"g":12345678901234567890123}}',
        105,
        {
            "a": "1E+400",
            "b": "1.50",
            "c": "1E+5",
            "d": "true",
            "f": "-0",
            "g": "12345678901234567890123",
        },
    ),
    (
        b'{"code":105,"extFields":{"a":-0.0,"b":-0e5,"c":0.0000001,"d":1.0E-10,"e":123.456e3,'
        b'"h":1.05e2,"i":false}}',
        105,
        {
            "a": "0.0",
            "b": "0E+5",
            "c": "1E-7",
            "d": "1.0E-10",
            "e": "123456",
            "h": "105",
            "i": "false",
        },
    ),
    (b'{"code":105,"extFields":{"a":1,"a":2,"":"v","k":""}}', 105, {"a": "2", "": "v", "k": ""}),
    (b'{"code":105,"extFields":null}', 105, {}),
    (b'{"code":105,"language":9}', 105, {}),
    (b'{"code":105.0}', None, None),
    (b'{"code":"105"}', None, None),
    (b'{"code":true}', None, None),
    (b'{"code":105,"extFields":{"h":{"x":1}}}', None, None),
    (b'{"code":105,"extFields":{"a":NaN}}', None, None),
    (b'{"code":105,"remark":5}', None, None),
]
JAVA_REFUSES = [
    b'{"code":99999999999}',
    b"[]",
    b'{"code":105} trailing',
    b'{"code":105,"extFields":[]}',
    b'{"code":105,"extFields":"x"}',
    b'{"code":105,"extFields":false}',
    b'{"code":105,"extFields":0}',
    b'{"code":105,"language":99}',
    b'{"code":105,"language":true}',
    b'{"code":105,"language":1.5}',
    b'{"code":105,"version":"abc"}',
    b'{"code":105,"extFields":{"a":Infinity}}',
]


@pytest.mark.parametrize("header, code, ext", JAVA_DECODES)
def test_json_header_reads_as_java_does_or_is_refused(header, code, ext):
    if code is None:
        with pytest.raises(MalformedFrameError):
            decode(json_frame(header))
        return
    command = decode(json_frame(header))
    assert (command.code, dict(command.ext_fields)) == (code, ext)


@pytest.mark.parametrize("header", JAVA_REFUSES)
def test_json_header_java_refuses_is_refused(header):
    with pytest.raises(MalformedFrameError):
        decode(json_frame(header))


def test_lenient_probes_over_the_wire(server):
    (null_code,), _ = exchange(server.port, json_frame(b'{"code":null,"opaque":5}'))
    assert (null_code.opaque, null_code.code) == (5, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
    assert null_code.remark == " request type 0 not supported"  # as the Java NameServer
    (huge,), _ = exchange(
        server.port, json_frame(b'{"code":105,"opaque":6,"extFields":{"topic":1e400}}')
    )
    assert huge.code == ResponseCode.INVALID_PARAMETER and "1E+400" in huge.remark
    assert exchange(server.port, json_frame(b'{"code":105,"extFields":{"topic":NaN}}')) == (
        [],
        True,
    )
    assert http_status(http(server.http_port, b"GET /topics\r\n\r\n")) == 400  # no version
    assert http_status(http(server.http_port, b"GET /topics HTTP/2.0\r\n\r\n")) == 505


# -- limits plumbing --


def test_limit_defaults_are_the_conf_file(monkeypatch):
    for name in [n for n in os.environ if n.startswith("ROUTELAKE_SERVE_")]:
        monkeypatch.delenv(name)
    assert Limits.from_config(load_config().serve) == Limits()
    assert Limits().collector_max_frame_bytes == 16 << 20 > Limits().max_frame_bytes
    assert clip("a" * 65) == "a" * 64 + "... (65 chars)" and clip("short") == "short"
    with pytest.raises(ValueError):
        Limits(request_timeout_s=0)


# -- fuzz --


def _mutate(rng: random.Random, frames: list[bytes]) -> bytes:
    frame = bytearray(rng.choice(frames))
    choice = rng.randrange(6)
    if choice == 0:
        return rng.randbytes(rng.randrange(1, 96))
    if choice == 1:
        return bytes(frame[: rng.randrange(1, len(frame))])
    if choice == 2:
        for _ in range(rng.randrange(1, 5)):
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
        return bytes(frame)
    if choice == 3:
        offset = rng.choice((0, 4, 8, 12, 17, 21))
        frame[offset : offset + 4] = struct.pack(">i", rng.randint(-(2**31), 2**31 - 1))
        return bytes(frame)
    if choice == 4:  # JSON-level: a random value for a random key
        value = rng.choice(
            [
                b"null",
                b"1e999",
                b"-0",
                b'"\\ud800"',
                b"[]",
                b"{}",
                b"NaN",
                b'"' + b"z" * rng.randrange(1, 70_000) + b'"',
                b"2147483648",
            ]
        )
        key = rng.choice(
            [
                b"code",
                b"opaque",
                b"flag",
                b"version",
                b"language",
                b"remark",
                b"extFields",
                b"topic",
            ]
        )
        return json_frame(
            b'{"code":105,"extFields":{"topic":"Orders"},"' + key + b'":' + value + b"}"
        )
    cut = rng.randrange(len(frame))
    return bytes(frame[:cut]) + rng.randbytes(8) + bytes(frame[cut:])


def test_seeded_random_frames(server):
    rng = random.Random(1212)
    frames = [
        encode(RemotingCommand(code=c, version=v, opaque=9, ext_fields=e, serialize_type=k))
        for c, v, e in (
            (RequestCode.GET_ROUTEINFO_BY_TOPIC, NAMESRV_VERSION, {"topic": "Orders"}),
            (RequestCode.GET_TOPICS_BY_CLUSTER, 0, {"cluster": "ClusterA"}),
            (RequestCode.GET_BROKER_CLUSTER_INFO, 0, {}),
        )
        for k in (SerializeType.JSON, SerializeType.ROCKETMQ)
    ]
    started, runs, outcomes = time.monotonic(), 0, {"closed": 0, "answered": 0}
    rss_before = server.rss_bytes()
    while runs < 400 and time.monotonic() - started < 20:
        runs += 1
        data = (
            request(topic="Orders", opaque=1)
            + _mutate(rng, frames)
            + request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=2)
        )
        with connect(server.port) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            raw, closed = read_until_eof(sock)
        assert closed, "a fuzz connection was left hanging"
        try:
            replies = FrameDecoder().feed(raw)
        except RemotingCodecError as exc:  # the server only ever writes whole, valid frames
            raise AssertionError(f"run {runs}: server wrote a bad frame") from exc
        assert replies and (replies[0].opaque, replies[0].code) == (1, 0), f"run {runs}"
        assert all(r.is_response for r in replies)
        assert_no_leak(raw, server)
        outcomes["answered" if replies[-1].opaque == 2 else "closed"] += 1
    assert runs >= 100 and all(outcomes.values()), (runs, outcomes)
    assert server.rss_bytes() - rss_before < 16 << 20


def _mutate_http(rng: random.Random) -> bytes:
    data = bytearray(
        rng.choice(
            [
                GET_ROUTE,
                b"GET /clusters HTTP/1.1\r\nHost: t\r\n\r\n",
                b"GET /metrics HTTP/1.0\r\n\r\n",
            ]
        )
    )
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(data))
        data[at : at + 1] = rng.choice(
            [rng.randbytes(1), b"\r\n", b":", b" ", b"\x00", b"%", b"\xff", b"HTTP/1.1", b""]
        )
    return bytes(data)


def test_seeded_random_http_requests(server):
    rng = random.Random(1213)
    probes = [_mutate_http(rng) for _ in range(150)]
    # Concurrent: an incomplete request waits for its deadline (request_timeout_s).
    with ThreadPoolExecutor(16) as pool:
        raws = list(
            pool.map(
                lambda data: http(server.http_port, data, TEST_LIMITS.request_timeout_s + 3), probes
            )
        )
    statuses = {http_status(raw) for raw in raws}
    for raw in raws:
        assert http_status(raw) != 500 and b"Traceback" not in raw
        assert_no_leak(raw, server)
    assert {200, 400} <= statuses, statuses
