"""`routectl demo`: the embedded local default, end to end on one machine.

Starts the local Kafka broker, a simulated fleet producing live events, the streaming job and
the lookup service, then prints a table every few seconds: watermark lag, clusters, broker
groups with their live brokers, and one topic's route (`render`).
Ctrl-C (or --duration) stops everything it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routelake_dev import kafka_local
from routing_lib.config import Config, project_path

DEMO_DIR = ".work/demo"


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    out = open(log, "wb")  # lives as long as the child
    return subprocess.Popen(
        [sys.executable, "-m", "routing_lib.cli", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=project_path("."),
        start_new_session=True,
    )


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read())
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
    lag = "-" if view.watermark is None else f"{(view.now_ms - view.watermark) / 1000:.1f} s"
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


def _show(http: str, started: float) -> None:
    view = fetch_refresh(http, started)
    print()
    if view is None:
        print(f"--- {time.strftime('%H:%M:%S')}  lookup service: waiting for the first batch...")
    else:
        print(render(view))


def run_demo(config: Config, brokers: int, topics: int, duration_s: float | None) -> int:
    work = project_path(DEMO_DIR)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"demo: logs and tables in {work}")
    kafka = kafka_local.start(config.kafka)
    topic = f"demo-events-{int(time.time())}"
    kafka_local.create_topic(config.kafka.bootstrap_servers, topic)
    print(f"kafka {config.kafka.bootstrap_servers} ready; topic {topic}")
    warehouse, http_port = work / "warehouse", config.serve.http_port
    children = [
        _spawn(
            [
                "simulate",
                "--topic",
                topic,
                "--brokers",
                str(brokers),
                "--topics",
                str(topics),
                "--seed",
                "demo",
            ],
            work / "simulate.log",
        ),
        _spawn(
            [
                "run",
                "--topic",
                topic,
                "--warehouse",
                str(warehouse),
                "--checkpoint",
                str(work / "checkpoint"),
                "--trigger-interval",
                "1 second",  # publishes about every second (issue 8)
                "-v",
            ],
            work / "job.log",
        ),
        _spawn(["serve", "--warehouse", str(warehouse)], work / "serve.log"),
    ]
    print(
        f"simulator, streaming job and lookup service started: "
        f"NameServer protocol on 127.0.0.1:{config.serve.port}, "
        f"HTTP on http://127.0.0.1:{http_port} (Ctrl-C stops the demo)"
    )
    stop = False

    def on_signal(*_) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        while not stop and (duration_s is None or time.monotonic() - started < duration_s):
            for child, name in zip(children, ("simulator", "job", "lookup"), strict=True):
                if child.poll() is not None:
                    print(f"the {name} exited ({child.returncode}); see {work}")
                    return 1
            _show(f"http://127.0.0.1:{http_port}", started)
            time.sleep(5)
        return 0
    finally:
        print("\ndemo: stopping...")
        for child in children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        for child in children:
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
        if kafka.started:
            kafka_local.stop(config.kafka)
        print("demo: stopped")
