"""`routectl demo`: the embedded local default, end to end on one machine.

Starts the local Kafka broker, a simulated fleet producing live events, the streaming job and
the lookup service, then prints the cluster table and one topic's route every few seconds.
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
from pathlib import Path

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


def _show(http: str, started: float) -> None:
    clusters = _get(f"{http}/clusters")
    print(f"\n--- {time.strftime('%H:%M:%S')} (+{time.monotonic() - started:.0f} s) ---")
    if clusters is None or "data" not in clusters:
        print("lookup service: waiting for the first published batch...")
        return
    info = clusters["data"]
    print(f"watermark {clusters.get('watermark')}, table versions {clusters.get('versions')}")
    for cluster, names in info["clusterAddrTable"].items():
        for name in names:
            addrs = info["brokerAddrTable"].get(name, {}).get("brokerAddrs", {})
            print(f"  {cluster:12} {name:12} " + "  ".join(f"{i}={a}" for i, a in addrs.items()))
    topics = [
        t
        for t in (_get(f"{http}/topics") or {}).get("data", {}).get("topicList", [])
        if t.startswith("Topic")
    ]
    if topics:
        route = _get(f"{http}/topics/{topics[0]}/route") or {}
        queues = route.get("data", {}).get("queueDatas", [])
        print(
            f"  route of {topics[0]}: "
            + ", ".join(
                f"{q['brokerName']}(r{q['readQueueNums']}/w{q['writeQueueNums']} perm {q['perm']})"
                for q in queues
            )
        )


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
                "2 seconds",
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
