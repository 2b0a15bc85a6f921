"""`routectl demo`: the embedded local default, end to end on one machine.

Starts the local Kafka broker, a simulated fleet producing live events, the streaming job and
the lookup service, then prints a table every few seconds: watermark lag, clusters, broker
groups with their live brokers, and one topic's route (`render`).
Ctrl-C, SIGTERM, a hangup (the terminal closed) or --duration stops everything it started, in
order; if the demo itself is killed (kill -9), the kernel kills its children
(routing_lib/lifeline.py), and their own children follow (docs/troubleshooting.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routelake_dev import kafka_local
from routing_lib import lifeline
from routing_lib.config import Config, project_path

DEMO_DIR = ".work/demo"
# An orderly stop of the children (SIGTERM) may take this long before they are killed: the
# streaming job stops its query, the JVM follows its driver.
CHILD_STOP_S = 6.0
KAFKA_STOP_S = 5.0  # the demo's own broker, after its clients are gone
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Stop(Exception):
    """Raised in the main thread by a stop signal: ends a sleep or an HTTP call at once."""


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    out = open(log, "wb")  # lives as long as the child
    return subprocess.Popen(
        [sys.executable, "-m", "routing_lib.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=project_path("."),
        # Its own session: a terminal's Ctrl-C reaches the demo only, which stops the children
        # in order; and if the demo dies without doing so, the kernel kills them.
        start_new_session=True,
        preexec_fn=lifeline.die_with_parent(),
    )


def _get(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Refresh:
    """What one refresh of the demo shows, as read from the lookup service's HTTP API."""

    clock: str  # wall clock, HH:MM:SS
    elapsed_s: float  # since the demo started
    now_ms: int  # wall clock: the simulated fleet's eventTime is the wall clock
    watermark: int | None
    clusters: dict[str, Any]  # ClusterInfo: brokerAddrTable, clusterAddrTable
    live: list[dict[str, Any]]  # brokerLiveTable rows: clusterName, brokerAddr, ...
    topic: str | None = None  # the sample route's topic
    route: dict[str, Any] | None = None  # its TopicRouteData


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def render(view: Refresh) -> str:
    """The refresh as a few aligned lines: a summary (watermark lag, counts), one row per broker
    group (cluster, master, slaves, live brokers) and a sample route."""
    # Before the job's first batch the tables carry watermark 0 (or none): no lag to show.
    watermark = view.watermark
    lag = (
        "-" if watermark is None or watermark <= 0 else f"{(view.now_ms - watermark) / 1000:.1f} s"
    )
    live = {(row["clusterName"], row["brokerAddr"]) for row in view.live}
    groups = view.clusters.get("brokerAddrTable", {})
    rows = [["cluster", "group", "master", "slaves", "live"]]
    listed = 0
    for cluster, names in sorted(view.clusters.get("clusterAddrTable", {}).items()):
        for name in sorted(names):
            addrs = {int(i): a for i, a in groups.get(name, {}).get("brokerAddrs", {}).items()}
            slaves = [addrs[i] for i in sorted(addrs) if i != 0]
            up = sum((cluster, a) in live for a in addrs.values())
            listed += len(addrs)
            rows.append(
                [cluster, name, addrs.get(0, "-"), ", ".join(slaves) or "-", f"{up}/{len(addrs)}"]
            )
    lines = [
        f"--- {view.clock} (+{view.elapsed_s:.0f} s)  watermark lag {lag}  "
        f"clusters {len(view.clusters.get('clusterAddrTable', {}))}  groups {len(rows) - 1}  "
        f"live brokers {len(live)}/{listed}",
        *_table(rows),
    ]
    if view.topic is not None and view.route is not None:
        queues = view.route.get("queueDatas", [])
        lines.append(
            f"route of {view.topic}: "
            + ", ".join(
                f"{q['brokerName']} r{q['readQueueNums']}/w{q['writeQueueNums']} perm {q['perm']}"
                for q in queues
            )
        )
    return "\n".join(lines)


def fetch_refresh(http: str, started: float) -> Refresh | None:
    """The lookup service's view now; None before it published its first batch."""
    clusters = _get(f"{http}/clusters")
    if clusters is None or "data" not in clusters:
        return None
    live = (_get(f"{http}/brokers/live") or {}).get("data", [])
    topics = [
        t
        for t in (_get(f"{http}/topics") or {}).get("data", {}).get("topicList", [])
        if t.startswith("Topic")
    ]
    topic = min(topics, key=lambda t: (len(t), t)) if topics else None
    route = (_get(f"{http}/topics/{topic}/route") or {}).get("data") if topic else None
    return Refresh(
        clock=time.strftime("%H:%M:%S"),
        elapsed_s=time.monotonic() - started,
        now_ms=time.time_ns() // 1_000_000,
        watermark=clusters.get("watermark"),
        clusters=clusters["data"],
        live=live,
        topic=topic,
        route=route,
    )


def _say(text: str) -> None:
    """Print, unless stdout is gone (`demo | tee` whose tee died of the same Ctrl-C, a closed
    terminal): then print nothing more, and let nothing fail on it again at exit."""
    try:
        print(text, flush=True)
    except OSError:  # BrokenPipeError, EIO from a hung-up terminal
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _show(http: str, started: float) -> None:
    view = fetch_refresh(http, started)
    if view is None:
        _say(f"\n--- {time.strftime('%H:%M:%S')}  lookup service: waiting for the first batch...")
    else:
        _say("\n" + render(view))


def _stop_children(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each child's process group, SIGKILL what is left after CHILD_STOP_S."""
    for child in children:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + CHILD_STOP_S
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


@dataclass
class _Started:
    """What the demo started so far: what its cleanup stops."""

    kafka: kafka_local.StartResult | None = None
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)


class _ChildExited(Exception):
    pass


def run_demo(
    config: Config,
    brokers: int,
    topics: int,
    duration_s: float | None,
    work_dir: str | None = None,
) -> int:
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        if not stopping:  # once: the cleanup itself must not be interrupted
            stopping = True
            raise _Stop

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    started = _Started()
    work = Path(work_dir).resolve() if work_dir else project_path(DEMO_DIR)
    try:
        _start(config, brokers, topics, work, started)
        _watch(started.children, config.serve.http_port, duration_s, work)
        return 0
    except _Stop:
        return 0
    except _ChildExited:
        return 1
    finally:
        stopping = True
        _say("\ndemo: stopping...")
        _stop_children(started.children)
        if started.kafka is not None and started.kafka.started:
            kafka_local.stop(config.kafka, timeout_s=KAFKA_STOP_S)
        _say("demo: stopped")


def _start(config: Config, brokers: int, topics: int, work: Path, started: _Started) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _say(f"demo: logs and tables in {work}")
    started.kafka = kafka_local.start(config.kafka, die_with_parent=True)
    topic = f"demo-events-{int(time.time())}"
    kafka_local.create_topic(config.kafka.bootstrap_servers, topic)
    _say(f"kafka {config.kafka.bootstrap_servers} ready; topic {topic}")
    warehouse = work / "warehouse"
    simulate = ["simulate", "--topic", topic, "--brokers", str(brokers), "--topics", str(topics)]
    job = ["run", "--topic", topic, "--warehouse", str(warehouse)]
    job += ["--checkpoint", str(work / "checkpoint")]
    # a batch about every second, so the live view follows the fleet closely
    job += ["--trigger-interval", "1 second", "-v"]
    for args, log in (
        ([*simulate, "--seed", "demo"], "simulate.log"),
        (job, "job.log"),
        (["serve", "--warehouse", str(warehouse)], "serve.log"),
    ):
        started.children.append(_spawn(args, work / log))
    _say(started_message(config.serve.port, config.serve.http_port))


def started_message(port: int, http_port: int) -> str:
    """What the demo says once everything runs: where to point clients and a browser."""
    return (
        f"simulator, streaming job and lookup service started: "
        f"NameServer protocol on 127.0.0.1:{port}, HTTP API on http://127.0.0.1:{http_port}\n"
        f"route console: open http://127.0.0.1:{http_port}/ in a browser (Ctrl-C stops the demo)"
    )


def _watch(
    children: list[subprocess.Popen[bytes]], http_port: int, duration_s: float | None, work: Path
) -> None:
    started = time.monotonic()
    while duration_s is None or time.monotonic() - started < duration_s:
        for child, name in zip(children, ("simulator", "job", "lookup"), strict=True):
            if child.poll() is not None:
                _say(f"the {name} exited ({child.returncode}); see {work}")
                raise _ChildExited
        _show(f"http://127.0.0.1:{http_port}", started)
        time.sleep(5)
