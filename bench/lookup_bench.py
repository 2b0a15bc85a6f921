"""Route lookups per second: the real Java NameServer vs routelake's lookup service, one run.

    scripts/fetch_rocketmq.sh
    .venv/bin/python -m bench.lookup_bench --duration 20

1. Builds a warehouse without Spark from a golden fixture (pure replay, the fixture's 10.x
   broker addresses moved to 127.x as in tests/test_mqadmin.py) and starts `routectl serve`
   on it (its own process, free loopback ports).
2. Starts the Java NameServer (RocketMQ 5.3.3 `NamesrvStartup` from .jars/rocketmq, bound to
   127.0.0.1, user.home and ROCKETMQ_HOME in a temp dir) and loads it with the same routes:
   REGISTER_BROKER (103) per broker, body = RegisterBrokerBody JSON, uncompressed. The
   registering connection stays open for the whole run (closing it unregisters the brokers).
3. Checks that both answer GET_ROUTEINFO_BY_TOPIC (105) with the same TopicRouteData for every
   topic, and GET_BROKER_CLUSTER_INFO (106) with the same ClusterInfo.
4. Runs one load generator against (a) the Java NameServer, (b) our remoting port, (c) our
   HTTP API: `--procs` client processes (asyncio), each with `--conns` connections. Remoting:
   `--depth` pipelined 105 requests in flight per connection, random topics, pre-encoded
   frames (only the opaque is patched) and only the response header read, so the client
   spends as little CPU as possible. HTTP: keep-alive GET /topics/{t}/route, one request at a
   time per connection, with conns x depth connections (same requests in flight).
   `--warmup` seconds are not counted (JIT), then `--duration` seconds are.

The clients share the machine's cores with the server under test: the CPU each used is
printed next to the numbers. Every process started here is stopped at the end, also on
failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routelake_dev import mqadmin
from routing_lib.core.tables import BROKER_ADDR, BROKER_LIVE, FILTER_SERVER, TOPIC_QUEUE
from routing_lib.lookup import jsonbody
from routing_lib.lookup.routes import RouteIndex
from routing_lib.read.warehouse import WarehouseSnapshot
from routing_lib.remoting.frames import (
    RemotingCommand,
    SerializeType,
    encode,
)
from routing_lib.remoting.protocol import NAMESRV_VERSION, RequestCode
from tests.support.lookup_support import RemotingClient, Warehouse, fixture_tables

REPO = Path(__file__).resolve().parents[1]

GOLDEN = REPO / "tests" / "golden"
LOOPBACK = "127.0.0.1"
# distribution/bin/runserver.sh (JDK 9+) for 5.3.3, with a 1 GiB heap instead of 4 GiB.
NAMESRV_JVM_OPTS = (
    "-server",
    "-Xms1g",
    "-Xmx1g",
    "-XX:MetaspaceSize=128m",
    "-XX:MaxMetaspaceSize=320m",
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=16m",
    "-XX:G1ReservePercent=25",
    "-XX:InitiatingHeapOccupancyPercent=30",
    "-XX:SoftRefLRUPolicyMSPerMB=0",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:-UseLargePages",
)
# JSON request headers carry the opaque as decimal text: keep it 10 digits wide so a
# pre-encoded frame can be patched in place (int32 max is 2147483647).
OPAQUE_BASE = 1_000_000_000
_JSON_OPAQUE = re.compile(rb'"opaque":(-?\d+)')
_JSON_CODE = re.compile(rb'"code":(-?\d+)')


def _header_int(pattern: re.Pattern[bytes], header: bytes) -> int:
    match = pattern.search(header)
    if match is None:
        raise ValueError(f"no {pattern.pattern!r} in a response header: {header[:200]!r}")
    return int(match.group(1))


# -- processes: everything started is stopped --


class Processes:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **kwargs,
        )
        log.close()  # the child has its own descriptor
        self.procs.append((name, proc))
        return proc

    def stop_all(self) -> None:
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    print(f"  {name} (pid {proc.pid}) ignored SIGTERM: killed", flush=True)
                    proc.kill()
                    proc.wait()
        self.procs.clear()

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs / f"{name}.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def serve_argv(warehouse: Path, port: int, http_port: int, workers: int | None) -> list[str]:
    """`routectl serve` on `warehouse` as this interpreter runs it (run from the repo root)."""
    argv = [sys.executable, "-m", "routing_lib.cli", "serve", "--warehouse", str(warehouse)]
    argv += ["--port", str(port), "--http-port", str(http_port)]
    return argv + (["--workers", str(workers)] if workers else [])


def wait_for(
    what: str, predicate, timeout: float, proc: subprocess.Popen, procs: Processes, name: str
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{name} exited ({proc.returncode}) before {what}:\n" + procs.log_tail(name)
            )
        with contextlib.suppress(OSError):
            if predicate():
                return
        time.sleep(0.2)
    raise RuntimeError(f"{name}: no {what} after {timeout:.0f} s:\n" + procs.log_tail(name))


def port_open(port: int) -> bool:
    with socket.create_connection((LOOPBACK, port), timeout=1):
        return True


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine (all cores) spent in processes so far, plus time the
    hypervisor stole. Interrupt time is left out: loopback traffic is processed there and is
    charged to no process, so it would look like other work."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = ticks
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


def wait_idle(timeout: float, window: float = 5.0, threshold: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while True:
        before = machine_busy_seconds()
        time.sleep(window)
        busy = (machine_busy_seconds() - before) / window
        if busy < threshold:
            print(f"machine idle ({busy:.2f} cores busy over {window:g} s)", flush=True)
            return
        if time.monotonic() >= deadline:
            print(
                f"machine still busy ({busy:.2f} cores) after {timeout:g} s: running anyway",
                flush=True,
            )
            return


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (the lookup's workers are its zygote's children)."""
    with contextlib.suppress(OSError):
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [pid, *(d for c in text.split() for d in process_tree(int(c)))]
    return [pid]


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in process_tree(pid))


def all_processes_cpu() -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds so far) of every process (to name other work)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                text = (entry / "stat").read_text()
                name = text[text.index("(") + 1 : text.rindex(")")]
                fields = text.rsplit(")", 1)[1].split()
                out[int(entry.name)] = (
                    name,
                    (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
                )
    return out


def top_others(before: dict, after: dict, exclude: set[int], seconds: float) -> str:
    used = sorted(
        (
            (cpu - before.get(pid, (name, 0.0))[1], pid, name)
            for pid, (name, cpu) in after.items()
            if pid not in exclude
        ),
        reverse=True,
    )
    return ", ".join(
        f"{name}[{pid}] {cores / seconds:.2f}c"
        for cores, pid, name in used[:3]
        if cores / seconds >= 0.05
    )


# -- the Java NameServer, loaded with the warehouse's routes --


def start_java_namesrv(procs: Processes, home: Path, port: int, heap: str) -> subprocess.Popen:
    home.mkdir(parents=True)
    conf = home / "namesrv.properties"
    conf.write_text(
        f"listenPort={port}\nbindAddress={LOOPBACK}\nrocketmqHome={home}\n"
        f"kvConfigPath={home / 'kvConfig.json'}\n"
    )
    opts = [o if not o.startswith(("-Xms", "-Xmx")) else o[:4] + heap for o in NAMESRV_JVM_OPTS]
    argv = mqadmin.java_command(
        mqadmin.NAMESRV_MAIN,
        ["-c", str(conf)],
        home=home,
        logback=mqadmin.NAMESRV_LOGBACK,
        jvm_opts=opts,
    )
    proc = procs.start("java-namesrv", argv, env=mqadmin.java_env(home), cwd=home)
    wait_for("listening port", lambda: port_open(port), 90, proc, procs, "java-namesrv")
    return proc


def topic_config(row: dict) -> dict:
    # TopicConfig as fastjson reads it (RegisterBrokerBody.topicConfigSerializeWrapper).
    return {
        "attributes": {},
        "order": False,
        "perm": int(row["perm"]),
        "readQueueNums": int(row["read_queue_nums"]),
        "topicFilterType": "SINGLE_TAG",
        "topicName": row["topic"],
        "topicSysFlag": int(row["topic_sys_flag"]),
        "writeQueueNums": int(row["write_queue_nums"]),
    }


def register_brokers(client: RemotingClient, tables: dict[str, list[dict]]) -> int:
    """REGISTER_BROKER for every broker of broker_addr_table, so that the Java NameServer's
    RouteInfoManager ends up with the tables' routes.

    RouteInfoManager.registerBroker takes topic configs only from the master or the prime
    slave (smallest id), and refuses a one-topic table from a broker it does not know yet:
    so every broker registers first with no topics, then the smallest id of each group again
    with the group's topics and its real dataVersion. Returns the number of requests sent.
    """
    live = {(r["cluster_name"], r["broker_addr"]): r for r in tables[BROKER_LIVE]}
    filters = {
        (r["cluster_name"], r["broker_addr"]): list(r["filter_server_list"] or [])
        for r in tables[FILTER_SERVER]
    }
    topics: dict[str, dict[str, dict]] = {}
    for row in tables[TOPIC_QUEUE]:
        topics.setdefault(row["broker_name"], {})[row["topic"]] = topic_config(row)
    groups: dict[str, list[dict]] = {}
    for row in tables[BROKER_ADDR]:
        groups.setdefault(row["broker_name"], []).append(row)

    def register(row: dict, topic_table: dict, version: dict) -> None:
        key = (row["cluster"], row["broker_addr"])
        ext = {
            "brokerName": row["broker_name"],
            "brokerAddr": row["broker_addr"],
            "clusterName": row["cluster"],
            "brokerId": str(row["broker_id"]),
            "haServerAddr": (live.get(key) or {}).get("ha_server_addr") or "",
            "heartbeatTimeoutMillis": str(3_600_000),  # no expiry during the run
            "enableActingMaster": "true" if row.get("enable_acting_master") else "false",
            "compressed": "false",
            "bodyCrc32": "0",
        }
        if row.get("zone_name"):
            ext["__ZONE_NAME"] = row["zone_name"]  # MixAll.ZONE_NAME, read from extFields
        body = {
            "filterServerList": filters.get(key, []),
            "topicConfigSerializeWrapper": {
                "dataVersion": version,
                "topicConfigTable": topic_table,
            },
        }
        response = client.call(RequestCode.REGISTER_BROKER, body=json.dumps(body).encode(), **ext)
        if response.code != 0:
            raise RuntimeError(f"REGISTER_BROKER {key} answered {response.code} {response.remark}")

    sent = 0
    for name, rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: int(r["broker_id"]))
        for row in rows:
            register(row, {}, {"counter": 0, "stateVersion": 0, "timestamp": 0})
            sent += 1
        carrier = rows[0]
        dv = (live.get((carrier["cluster"], carrier["broker_addr"])) or {}).get("data_version")
        version = (
            {
                "counter": int(dv["counter"]),
                "stateVersion": int(dv["state_version"]),
                "timestamp": int(dv["timestamp"]),
            }
            if dv
            else {"counter": 1, "stateVersion": 0, "timestamp": 1}
        )
        register(carrier, topics.get(name, {}), version)
        sent += 1
    return sent


def canonical_route(route: dict) -> dict:
    return {
        "brokerDatas": sorted(route["brokerDatas"], key=lambda b: b["brokerName"]),
        "queueDatas": sorted(route["queueDatas"], key=lambda q: q["brokerName"]),
        "filterServerTable": route.get("filterServerTable") or {},
        "orderTopicConf": route.get("orderTopicConf"),
    }


def canonical_cluster_info(info: dict) -> dict:
    return {
        "brokerAddrTable": info["brokerAddrTable"],
        "clusterAddrTable": {c: sorted(n) for c, n in info["clusterAddrTable"].items()},
    }


def compare(
    java: RemotingClient, ours: RemotingClient, topics: list[str]
) -> tuple[list[str], list[str]]:
    """(topics with identical routes, differences)."""
    same, diffs = [], []
    for topic in topics:
        answers = [c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic) for c in (java, ours)]
        if answers[0].code != answers[1].code:
            diffs.append(f"{topic}: code java {answers[0].code} ours {answers[1].code}")
            continue
        routes = [canonical_route(json.loads(a.body)) for a in answers]
        if routes[0] == routes[1]:
            same.append(topic)
        else:
            diffs.append(f"{topic}: java {routes[0]} ours {routes[1]}")
    infos = [
        canonical_cluster_info(
            jsonbody.parse_legacy(c.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        )
        for c in (java, ours)
    ]
    if infos[0] != infos[1]:
        diffs.append(f"ClusterInfo: java {infos[0]} ours {infos[1]}")
    # Topic lists (HashSet orders in Java: compared as sets; the system list's brokerAddr is
    # any one broker's address on both sides).
    requests: list[tuple[str, int, dict[str, str]]] = [
        ("all topics (206)", RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
    ]
    requests += [
        (f"topics of {c} (224)", RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": c})
        for c in sorted(infos[0]["clusterAddrTable"])
    ]
    requests.append(("system topics (304)", RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, {}))
    addrs = {a for b in infos[0]["brokerAddrTable"].values() for a in b["brokerAddrs"].values()}
    for what, code, ext in requests:
        answers = [c.call(code, SerializeType.JSON, b"", **ext) for c in (java, ours)]
        lists: list[dict[str, Any]] = [
            jsonbody.parse_legacy(a.body) if a.code == 0 else {"code": a.code} for a in answers
        ]
        got = [
            (
                a.get("code"),
                sorted(a.get("topicList", ())),
                a.get("brokerAddr") in addrs if "brokerAddr" in a else None,
            )
            for a in lists
        ]
        if got[0] != got[1]:
            diffs.append(f"{what}: java {got[0]} ours {got[1]}")
    return same, diffs


# -- the load generator (runs in --procs child processes) --


@dataclass(frozen=True)
class Load:
    kind: str  # "remoting" | "http"
    port: int
    topics: tuple[str, ...]
    conns: int
    depth: int
    serialize: str  # "json" | "rocketmq"
    start_at: float  # time.monotonic() (system-wide clock, same in every process)
    warmup: float
    duration: float
    seed: int


class Tally:
    def __init__(self) -> None:
        self.latencies = array.array("d")
        self.count = 0
        self.errors = 0


def remoting_templates(load: Load) -> list[tuple[bytes, int]]:
    """One pre-encoded 105 frame per topic and the offset of its opaque."""
    kind = SerializeType.ROCKETMQ if load.serialize == "rocketmq" else SerializeType.JSON
    out = []
    for topic in load.topics:
        frame = encode(
            RemotingCommand(
                code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                version=NAMESRV_VERSION,
                opaque=OPAQUE_BASE,
                ext_fields={"topic": topic},
                serialize_type=kind,
            )
        )
        if kind == SerializeType.ROCKETMQ:
            offset = 8 + 5  # length, mark, then code(2) language(1) version(2)
        else:
            offset = frame.index(b'"opaque":%d' % OPAQUE_BASE) + len(b'"opaque":')
        out.append((frame, offset))
    return out


async def remoting_connection(
    load: Load, templates: list[tuple[bytes, int]], seed: int, tally: Tally
) -> None:
    reader, writer = await asyncio.open_connection(LOOPBACK, load.port)
    rnd = random.Random(seed)
    binary = load.serialize == "rocketmq"
    m0 = load.start_at + load.warmup
    m1 = m0 + load.duration
    pending: dict[int, float] = {}
    opaque = OPAQUE_BASE

    def send() -> None:
        nonlocal opaque
        opaque += 1
        frame, offset = templates[rnd.randrange(len(templates))]
        buf = bytearray(frame)
        if binary:
            struct.pack_into(">i", buf, offset, opaque)
        else:
            buf[offset : offset + 10] = b"%d" % opaque
        pending[opaque] = time.monotonic()
        writer.write(buf)

    await asyncio.sleep(max(0.0, load.start_at - time.monotonic()))
    for _ in range(load.depth):
        send()
    buf = bytearray()
    while pending:
        data = await asyncio.wait_for(reader.read(1 << 18), 30)
        if not data:
            raise ConnectionError("server closed the connection")
        buf += data
        now = time.monotonic()
        pos, end = 0, len(buf)
        while end - pos >= 8:
            length = int.from_bytes(buf[pos : pos + 4], "big")
            if end - pos - 4 < length:
                break
            header_len = int.from_bytes(buf[pos + 4 : pos + 8], "big") & 0xFFFFFF
            header = bytes(buf[pos + 8 : pos + 8 + header_len])
            body_len = length - 4 - header_len
            pos += 4 + length
            if binary:
                code = struct.unpack_from(">h", header, 0)[0]
                got = struct.unpack_from(">i", header, 5)[0]
            else:
                code = _header_int(_JSON_CODE, header)
                got = _header_int(_JSON_OPAQUE, header)
            sent_at = pending.pop(got)
            if m0 <= now <= m1:
                tally.count += 1
                if sent_at >= m0:
                    tally.latencies.append(now - sent_at)
                if code != 0 or body_len <= 0:
                    tally.errors += 1
            if now < m1:
                send()
        del buf[:pos]
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def http_connection(load: Load, requests: list[bytes], seed: int, tally: Tally) -> None:
    reader, writer = await asyncio.open_connection(LOOPBACK, load.port)
    rnd = random.Random(seed)
    m0 = load.start_at + load.warmup
    m1 = m0 + load.duration
    await asyncio.sleep(max(0.0, load.start_at - time.monotonic()))
    while time.monotonic() < m1:
        sent_at = time.monotonic()
        writer.write(requests[rnd.randrange(len(requests))])
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        status = head[9:12]
        match = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        if match is None:
            raise RuntimeError(f"no content-length in {head[:200]!r}")
        await reader.readexactly(int(match.group(1)))
        now = time.monotonic()
        if m0 <= now <= m1:
            tally.count += 1
            if sent_at >= m0:
                tally.latencies.append(now - sent_at)
            if status != b"200":
                tally.errors += 1
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def run_load(load: Load) -> Tally:
    tally = Tally()
    if load.kind == "remoting":
        templates = remoting_templates(load)
        tasks = [
            remoting_connection(load, templates, load.seed * 1000 + i, tally)
            for i in range(load.conns)
        ]
    else:
        requests = [
            (
                f"GET /topics/{urllib.parse.quote(t, safe='')}/route HTTP/1.1\r\n"
                f"Host: {LOOPBACK}:{load.port}\r\n\r\n"
            ).encode()
            for t in load.topics
        ]
        tasks = [
            http_connection(load, requests, load.seed * 1000 + i, tally)
            for i in range(load.conns * load.depth)
        ]
    await asyncio.gather(*tasks)
    return tally


def load_process(load: Load, out) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    try:
        tally = asyncio.run(run_load(load))
        out.send((tally.count, tally.errors, tally.latencies.tobytes(), None))
    except BaseException as exc:  # reported by the parent
        out.send((0, 0, b"", f"{type(exc).__name__}: {exc}"))
    finally:
        out.close()


@dataclass
class Result:
    name: str
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    server_cpu: float  # cores used on average
    client_cpu: float
    other_cpu: float  # everything else on the machine meanwhile (other work disturbs)
    others: str  # the biggest other processes then


def measure(
    name: str, kind: str, port: int, server_pid: int, args: argparse.Namespace, topics: list[str]
) -> Result:
    ctx = mp.get_context("fork")
    start_at = time.monotonic() + 1.5  # time for the processes to connect
    workers = []
    try:
        for i in range(args.procs):
            load = Load(
                kind,
                port,
                tuple(topics),
                args.conns,
                args.depth,
                args.serialize,
                start_at,
                args.warmup,
                args.duration,
                seed=args.seed + i,
            )
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=load_process, args=(load, child_end), daemon=True)
            proc.start()
            child_end.close()
            workers.append((proc, parent_end))
        m0 = start_at + args.warmup
        time.sleep(max(0.0, m0 - time.monotonic()))
        pids = [server_pid, *(p.pid for p, _ in workers if p.pid is not None)]  # all started
        cpu0 = [tree_cpu_seconds(pid) for pid in pids] + [machine_busy_seconds()]
        everyone0 = all_processes_cpu()
        time.sleep(max(0.0, m0 + args.duration - time.monotonic()))
        cpu1 = [tree_cpu_seconds(pid) for pid in pids] + [machine_busy_seconds()]
        ours = {*process_tree(server_pid), *pids, os.getpid()}
        others = top_others(everyone0, all_processes_cpu(), ours, args.duration)
        count = errors = 0
        latencies = array.array("d")
        for proc, conn in workers:
            if not conn.poll(60):
                raise RuntimeError(f"{name}: a load process did not report")
            c, e, lat, failure = conn.recv()
            if failure:
                raise RuntimeError(f"{name}: load process failed: {failure}")
            count, errors = count + c, errors + e
            latencies.frombytes(lat)
            proc.join(10)
    finally:
        for proc, conn in workers:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
            conn.close()
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else 0.0

    used = [(b - a) / args.duration for a, b in zip(cpu0, cpu1, strict=True)]
    server, client, machine_total = used[0], sum(used[1:-1]), used[-1]
    return Result(
        name,
        count,
        errors,
        count / args.duration,
        pct(0.50),
        pct(0.99),
        server,
        client,
        max(0.0, machine_total - server - client),
        others,
    )


# -- the run --


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    java = java.splitlines()[0] if java else "java ?"
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({model or platform.machine()}), {mem_gib:.0f} GiB, "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}; "
        f"{java}"
    )


def rocketmq_version() -> str:
    jar = next(mqadmin.jars_dir().glob("rocketmq-namesrv-*.jar"), None)
    return jar.stem.removeprefix("rocketmq-namesrv-") if jar else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fixture",
        default="20_random_fleet_seed101",
        help="golden fixture whose final state is served",
    )
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds each")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds first")
    parser.add_argument("--procs", type=int, default=2, help="load generator processes")
    parser.add_argument("--conns", type=int, default=8, help="connections per process")
    parser.add_argument(
        "--depth", type=int, default=8, help="pipelined requests per remoting connection"
    )
    parser.add_argument(
        "--serialize",
        choices=("json", "rocketmq"),
        default="json",
        help="remoting header of the requests (Java clients default: json)",
    )
    parser.add_argument("--java-heap", default="1g")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--workers", type=int, help="routectl serve --workers (default: its own, the cores)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for the machine to be idle (other "
        "work below 0.2 cores over 5 s)",
    )
    args = parser.parse_args(argv)

    reason = mqadmin.missing_reason()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2

    def on_term(signum, frame):  # SIGTERM -> unwind through the finally below
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    if args.wait_idle > 0:
        wait_idle(args.wait_idle)
    tmp = Path(tempfile.mkdtemp(prefix="lookup-bench-"))
    logs = tmp / "logs"
    logs.mkdir()
    procs = Processes(logs)
    clients: list[RemotingClient] = []
    try:
        print(f"machine: {machine()}", flush=True)
        tables, watermark = fixture_tables(GOLDEN / args.fixture)
        Warehouse(tmp / "warehouse").publish(0, watermark, tables)
        index = RouteIndex(WarehouseSnapshot(tables, {}, watermark))
        topics = [t for t in index.topics if index.route(t) is not None]
        print(
            f"warehouse: fixture {args.fixture}, {len(topics)} routable topics, "
            f"{index.broker_count} broker groups, {len(tables[BROKER_ADDR])} brokers",
            flush=True,
        )

        our_port, http_port, java_port = free_port(), free_port(), free_port()
        ours = procs.start(
            "routectl-serve",
            serve_argv(tmp / "warehouse", our_port, http_port, args.workers),
            cwd=REPO,
        )
        java = start_java_namesrv(procs, tmp / "namesrv-home", java_port, args.java_heap)

        def ready() -> bool:
            with socket.create_connection((LOOPBACK, http_port), timeout=1) as s:
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return s.recv(64).startswith(b"HTTP/1.1 200")

        wait_for("snapshot", ready, 60, ours, procs, "routectl-serve")
        print(
            f"servers: Java NameServer {rocketmq_version()} on {LOOPBACK}:{java_port} "
            f"(pid {java.pid}); routectl serve remoting {LOOPBACK}:{our_port}, "
            f"http {LOOPBACK}:{http_port} (pid {ours.pid})",
            flush=True,
        )

        # stays open: closing it unregisters the brokers
        registrar = RemotingClient(java_port, timeout_s=10)
        clients.append(registrar)
        sent = register_brokers(registrar, tables)
        java_client = RemotingClient(java_port, timeout_s=10)
        our_client = RemotingClient(our_port, timeout_s=10)
        clients += [java_client, our_client]
        same, diffs = compare(java_client, our_client, topics)
        print(
            f"loaded Java NameServer with {sent} REGISTER_BROKER requests; same answers "
            f"from both: GET_ROUTEINFO_BY_TOPIC (105) for {len(same)}/{len(topics)} topics; "
            f"106, 206, 224 per cluster, 304: "
            f"{'all identical' if len(diffs) == len(topics) - len(same) else 'DIFFERENT'}",
            flush=True,
        )
        for diff in diffs[:5]:
            print(f"  DIFF {diff[:400]}", flush=True)
        if not same:
            raise RuntimeError("no topic with the same route on both servers")

        print(
            f"load: {args.procs} client processes x {args.conns} connections; remoting "
            f"{args.depth} pipelined requests per connection ({args.serialize} headers), "
            f"HTTP {args.conns * args.depth} keep-alive connections per process, 1 request "
            f"each; {args.warmup:g} s warm-up + {args.duration:g} s measured per target; "
            f"random topics among {len(same)}",
            flush=True,
        )
        results = []
        for name, kind, port, pid in (
            ("java-namesrv remoting", "remoting", java_port, java.pid),
            ("routelake remoting", "remoting", our_port, ours.pid),
            ("routelake http", "http", http_port, ours.pid),
        ):
            result = measure(name, kind, port, pid, args, same)
            results.append(result)
            print(f"  {name}: {result.rps:,.0f} req/s", flush=True)
        # The brokers must still be registered: a route still answers after the runs.
        still = java_client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=same[0]).code == 0

        print()
        head = (
            f"{'target':<24}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
            f"{'server CPU':>12}{'client CPU':>12}{'other CPU':>11}"
        )
        print(head)
        print("-" * len(head))
        for r in results:
            print(
                f"{r.name:<24}{r.rps:>10,.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{r.errors:>8}"
                f"{r.server_cpu:>11.2f}c{r.client_cpu:>11.2f}c{r.other_cpu:>10.2f}c"
            )
        java_r = results[0]
        for r in results[1:]:
            print(
                f"ratio {r.name} / java: req/s x{r.rps / java_r.rps:.2f}, "
                f"p50 x{r.p50_ms / java_r.p50_ms:.2f}, p99 x{r.p99_ms / java_r.p99_ms:.2f}"
            )
        print(
            f"(CPU = cores used on average over the measured window; the client processes "
            f"share the {os.cpu_count()} cores with the server; 'other' is the rest of the "
            f"machine: work not part of this run that competed for the cores. Java brokers "
            f"still registered after the runs: {still})"
        )
        busy = [r for r in results if r.other_cpu > 0.2]
        if busy:
            print(
                "WARNING: other work on the machine used "
                + "; ".join(
                    f"{r.other_cpu:.2f} cores during '{r.name}' ({r.others or 'no single process'})"
                    for r in busy
                )
                + ": these numbers are disturbed, rerun on a quiet machine"
            )
        print(
            "reproduce: scripts/fetch_rocketmq.sh && .venv/bin/python -m bench.lookup_bench "
            + shlex.join(argv if argv is not None else sys.argv[1:])
        )
        return 0 if all(r.errors == 0 for r in results) and still and not diffs else 1
    finally:
        for client in clients:
            with contextlib.suppress(OSError):
                client.close()
        procs.stop_all()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
