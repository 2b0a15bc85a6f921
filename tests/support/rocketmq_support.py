"""Test support for the collector and the real RocketMQ broker: run the collector on a thread
against real Kafka, talk to it as a broker, read back what Kafka holds; run broker JVMs."""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from routelake_dev import mqadmin
from routing_lib.collector.publisher import KafkaPublisher
from routing_lib.collector.server import CollectorServer
from routing_lib.collector.service import Collector
from routing_lib.remoting.frames import (
    FrameDecoder,
    RemotingCodecError,
    RemotingCommand,
    decode_frame,
    encode,
)
from routing_lib.remoting.limits import Limits
from routing_lib.remoting.tls import PLAIN, ListenerTls


class CollectorThread:
    """`routectl collect` in-process: a CollectorServer on its own event loop thread."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        tick_interval_ms: int = 3_600_000,
        publish_timeout_ms: int = 10_000,
        limits: Limits | None = None,
        collector_id: str = "test-collector",
        tls: ListenerTls = PLAIN,
    ) -> None:
        self.publisher = KafkaPublisher(bootstrap, topic, delivery_timeout_ms=publish_timeout_ms)
        self.collector = Collector(
            self.publisher, collector_id=collector_id, tick_interval_ms=tick_interval_ms
        )
        self.limits = limits or Limits()
        self.tls = tls
        self.started = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.server: CollectorServer

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        self.server = CollectorServer(self.collector, self.limits, tls=self.tls)
        try:
            await self.server.start()
        finally:
            self.started.set()
        try:
            await self.server.wait(self.stop_event)
        finally:
            await self.server.stop()

    @property
    def port(self) -> int:
        return self.server.port

    def __enter__(self) -> CollectorThread:
        self.thread.start()
        assert self.started.wait(20)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(40)
        assert not self.thread.is_alive()


def exchange(
    port: int, *requests: RemotingCommand, timeout: float = 30.0
) -> tuple[list[RemotingCommand], bool]:
    """Send requests on one connection, half-close, read to EOF: (answers, closed by peer)."""
    return exchange_bytes(port, b"".join(encode(r) for r in requests), timeout)


def exchange_bytes(
    port: int, data: bytes, timeout: float = 30.0
) -> tuple[list[RemotingCommand], bool]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # refused mid-send
        raw = bytearray()
        closed = True
        try:
            while chunk := sock.recv(65536):
                raw += chunk
        except TimeoutError:
            closed = False
        except ConnectionResetError:
            pass
    return FrameDecoder().feed(bytes(raw)) if raw else [], closed


def call(port: int, request: RemotingCommand) -> RemotingCommand:
    answers, _ = exchange(port, request)
    assert len(answers) == 1, answers
    assert answers[0].opaque == request.opaque and answers[0].is_response
    return answers[0]


class BrokerConnection:
    """One connection held open, as a broker holds its NameServer connection (its close
    removes the broker: contract "Connections"), one request answered at a time."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.decoder = FrameDecoder()

    def call(self, request: RemotingCommand) -> RemotingCommand:
        self.sock.sendall(encode(request))
        answers: list[RemotingCommand] = []
        while not answers:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("closed without an answer")
            answers = self.decoder.feed(data)
        assert answers[0].opaque == request.opaque and answers[0].is_response
        return answers[0]

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def records(bootstrap: str, topic: str, partition: int = 0) -> list[Any]:
    """Every record of one partition, as it is now."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[Any] = []
        while consumer.position(tp) < end:
            for batch in consumer.poll(timeout_ms=2000).values():
                out.extend(batch)
        return out
    finally:
        consumer.close()


def events(bootstrap: str, topic: str, *, ticks: bool = False) -> list[dict[str, Any]]:
    out = [json.loads(r.value) for r in records(bootstrap, topic)]
    return out if ticks else [e for e in out if e["eventType"] != "TICK"]


# -- several mqadmin commands in one JVM --

MQADMIN_BATCH = Path(__file__).resolve().parents[1] / "java" / "MQAdminBatch.java"
_BATCH_HEADER = re.compile(rb"@@MQADMIN-BATCH (\d+) (\d+) (\d+)\n")


@functools.cache
def _batch_classes() -> Path:
    """MQAdminBatch compiled once per test session (javac: ~1.5 s of CPU)."""
    out = Path(tempfile.mkdtemp(prefix="mqadmin-batch-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    classpath = str(mqadmin.jars_dir() / "*")
    subprocess.run(
        ["javac", "-nowarn", "-cp", classpath, "-d", str(out), str(MQADMIN_BATCH)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def run_mqadmin_batch(
    commands: Sequence[Sequence[str]],
    *,
    namesrv: str,
    home: Path,
    timeout: float = 90.0,
    jvm_opts: Sequence[str] = (),
) -> list[mqadmin.MQAdminResult]:
    """Run `commands` (each: mqadmin's arguments without -n) concurrently in one JVM
    (tests/java/MQAdminBatch.java), one result each: the JVM start-up and the client's ~3 s
    shutdown wait are paid once. `jvm_opts` are added (e.g. -Dtls.enable=true)."""
    args: list[str] = []
    for i, command in enumerate(commands):
        args += [*(["--next"] if i else []), *command, "-n", namesrv]
    home.mkdir(parents=True, exist_ok=True)
    argv = mqadmin.java_command(
        "MQAdminBatch", args, home=home, jvm_opts=[*mqadmin.MQADMIN_JVM_OPTS, *jvm_opts]
    )
    cp = argv.index("-cp") + 1
    argv[cp] += os.pathsep + str(_batch_classes())
    proc = subprocess.run(
        argv,
        capture_output=True,
        timeout=timeout,
        env=mqadmin.java_env(home),
        cwd=home,
        stdin=subprocess.DEVNULL,
    )
    out, results, at = proc.stdout, [], 0
    while match := _BATCH_HEADER.search(out, at):
        n_out, n_err = int(match.group(2)), int(match.group(3))
        start = match.end()
        text, err = out[start : start + n_out], out[start + n_out : start + n_out + n_err]
        command = commands[int(match.group(1))]
        results.append(
            mqadmin.MQAdminResult(
                tuple(command), proc.returncode, text.decode(errors="replace"), err.decode()
            )
        )
        at = start + n_out + n_err
    assert len(results) == len(commands), (proc.returncode, proc.stdout[-2000:], proc.stderr)
    return results


# -- real RocketMQ JVMs (../shared/notes/real-rocketmq-broker.md) --

BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
BROKER_JVM = ("-Xms128m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC")
NAMESRV_JVM = ("-Xmx256m", "-XX:+UseSerialGC")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for(predicate, timeout: float, what: str, step: float = 0.25, alive=lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert alive(), f"{what}: the process died"
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(step)


class JavaProcess:
    """One RocketMQ JVM (NameServer or broker) in its own scratch home; stop() always reaps."""

    def __init__(
        self,
        name: str,
        main: str,
        conf: dict[str, object],
        home: Path,
        jvm_opts: tuple[str, ...],
        logback: str,
    ) -> None:
        self.name, self.home = name, home
        home.mkdir(parents=True, exist_ok=True)
        self.conf_path = home / f"{name}.conf"
        self.conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.argv = mqadmin.java_command(
            main, ["-c", str(self.conf_path)], home=home, logback=logback, jvm_opts=jvm_opts
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> JavaProcess:
        log = (self.home / f"{self.name}.out").open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.home,
            env=mqadmin.java_env(self.home),
            start_new_session=True,
        )
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        path = self.home / f"{self.name}.out"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def namesrv(home: Path, port: int) -> JavaProcess:
    return JavaProcess(
        "namesrv",
        mqadmin.NAMESRV_MAIN,
        {"listenPort": port, "bindAddress": "127.0.0.1"},
        home,
        NAMESRV_JVM,
        mqadmin.NAMESRV_LOGBACK,
    )


def broker_conf(
    home: Path, port: int, namesrv_addrs: list[str], *, cluster: str, name: str, broker_id: int = 0
) -> dict[str, object]:
    """broker.conf keys every test broker shares: 127.0.0.1 only, its own small store (files
    sized for a test), no auto-created topics, registering every 10 s (the minimum), and no
    pre-online wait."""
    store = home / "store"
    return {
        "brokerClusterName": cluster,
        "brokerName": name,
        "brokerId": broker_id,
        "listenPort": port,
        "bindAddress": "127.0.0.1",
        "brokerIP1": "127.0.0.1",
        "brokerIP2": "127.0.0.1",
        "namesrvAddr": ";".join(namesrv_addrs),
        "storePathRootDir": store,
        "storePathCommitLog": store / "commitlog",
        "autoCreateTopicEnable": "false",
        "mappedFileSizeCommitLog": 67108864,
        "mappedFileSizeConsumeQueue": 60000,
        "maxHashSlotNum": 50000,
        "maxIndexNum": 200000,
        "diskMaxUsedSpaceRatio": 95,
        "registerNameServerPeriod": 10000,
        "skipPreOnline": "true",
    }


def broker(
    home: Path,
    port: int,
    namesrv_addrs: list[str],
    *,
    cluster: str,
    name: str,
    jvm_opts: tuple[str, ...] = (),
) -> JavaProcess:
    conf = {
        **broker_conf(home, port, namesrv_addrs, cluster=cluster, name=name),
        # Acting-master mode makes the broker send BROKER_HEARTBEAT and a 10 s
        # heartbeatTimeoutMillis (brokerNotActiveTimeoutMillis).
        "enableSlaveActingMaster": "true",
        "brokerNotActiveTimeoutMillis": 10000,
    }
    return JavaProcess(
        "broker", BROKER_MAIN, conf, home, (*BROKER_JVM, *jvm_opts), "rmq.broker.logback.xml"
    )


# -- a recording TCP proxy between a broker and the collector --


@dataclass
class Exchange:
    code: int
    broker_addr: str | None
    sent_ms: int
    answered_ms: int | None = None
    answer_code: int | None = None
    answer_ext: dict[str, str] = field(default_factory=dict)


class RecordingProxy:
    """Forwards 127.0.0.1:port -> 127.0.0.1:target frame by frame and records each request that
    `recorded` selects (default: every one) with its answer, matched by opaque, so a test knows
    exactly what the upstream acknowledged. With `lookups`, the requests not recorded go to that
    port instead (one client connection, two upstreams)."""

    def __init__(
        self,
        target: int,
        lookups: int | None = None,
        recorded: Callable[[RemotingCommand], bool] = lambda cmd: True,
    ) -> None:
        self.target, self.lookups, self.recorded = target, lookups, recorded
        self.exchanges: list[Exchange] = []
        self.port = 0
        self._ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection("127.0.0.1", self.target)
            other = (
                await asyncio.open_connection("127.0.0.1", self.lookups)
                if self.lookups is not None
                else None
            )
        except OSError:
            writer.close()  # an upstream that is away: the client's connection fails
            return
        pending: dict[int, Exchange] = {}

        def to_upstream(cmd: RemotingCommand, frame: bytes) -> None:
            if cmd.is_response or not self.recorded(cmd):
                (other or upstream)[1].write(frame)
                return
            exchange = Exchange(cmd.code, cmd.ext_fields.get("brokerAddr"), _now_ms())
            self.exchanges.append(exchange)
            pending[cmd.opaque] = exchange
            upstream[1].write(frame)

        def from_upstream(cmd: RemotingCommand, frame: bytes) -> None:
            if cmd.is_response and (exchange := pending.pop(cmd.opaque, None)) is not None:
                exchange.answered_ms, exchange.answer_code = _now_ms(), cmd.code
                exchange.answer_ext = dict(cmd.ext_fields)
            writer.write(frame)

        def from_other(cmd: RemotingCommand, frame: bytes) -> None:
            writer.write(frame)

        writers = (upstream[1],) if other is None else (upstream[1], other[1])
        pumps = [
            _pump(reader, to_upstream, writers),
            _pump(upstream[0], from_upstream, (writer,)),
        ]
        if other is not None:
            pumps.append(_pump(other[0], from_other, (writer,)))
        try:
            await asyncio.gather(*pumps)
        except asyncio.CancelledError:
            pass  # the proxy stops: end quietly (a cancelled handler task is logged as an error)

    def __enter__(self) -> Self:
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)

    def of(self, broker_addr: str, code: int | None = None) -> list[Exchange]:
        """The recorded requests of one broker (of one code), in sending order."""
        return [
            x
            for x in list(self.exchanges)
            if x.broker_addr == broker_addr and (code is None or x.code == code)
        ]


_LENGTH = struct.Struct(">i")


async def _pump(
    src: asyncio.StreamReader,
    forward: Callable[[RemotingCommand, bytes], None],
    close: tuple[asyncio.StreamWriter, ...],
) -> None:
    """Whole frames only (two upstreams answer on one connection: chunks must not mix)."""
    buffer = bytearray()
    try:
        while data := await src.read(65536):
            buffer += data
            while len(buffer) >= 4 and len(buffer) >= 4 + _LENGTH.unpack_from(buffer)[0]:
                end = 4 + _LENGTH.unpack_from(buffer)[0]
                frame = bytes(buffer[:end])
                del buffer[:end]
                forward(decode_frame(frame[4:]), frame)
    except (OSError, RemotingCodecError):
        pass
    finally:
        for writer in close:  # one side gone: the connection is gone, as with a NameServer
            writer.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
