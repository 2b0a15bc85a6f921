"""What an idle live stack costs per minute: CPU-seconds of `routectl collect` (TICKs only, no
broker), `routectl run` (its JVM and Python workers) and `routectl serve` (the lookup's polls).

    PYTHONPATH=$PWD .venv/bin/python bench/idle_cost.py [--trigger "1 second"]
        [--tick-ms 1000] [--poll-s 1.0] [--seconds 60] [--warm-up-s 20]

Needs the local Kafka (scripts/kafka.sh start). Each run uses a topic and warehouse of its
own; settings left out are the defaults of conf/routelake.toml. Prints one JSON line: the
settings, the CPU-seconds per minute of each process tree over the measured window (from
--warm-up-s after the job's first published batch), the batches published in the window and the load
average at its end. Compare settings back to back on the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from routelake_dev import kafka_local

REPO = Path(__file__).resolve().parent.parent
WORK = Path("/tmp/routelake-idle-cost")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
FIRST_BATCH_WAIT_S = 300  # Spark's start on a loaded machine


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def tree_cpu_s(root: int) -> float:
    """CPU-seconds of `root` and its live descendants, with the children they have reaped."""
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the ")": state is fields[0]; utime, stime, cutime, cstime are fields 11-14
        total += sum(int(f) for f in fields[11:15]) / CLOCK_TICKS
        todo.extend(_children(pid))
    return total


def routectl(name: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    out = (WORK / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "routing_lib.cli", *args],
        cwd=REPO,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def published_batches(log: Path) -> int:
    return len(re.findall(r"batch \d+ published", log.read_text(errors="replace")))


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(f"signal {signum}")


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)  # the finally below stops the stack
    parser = argparse.ArgumentParser()
    parser.add_argument("--trigger", default=None, help='e.g. "1 second" (default: conf)')
    parser.add_argument("--tick-ms", type=int, default=None)
    parser.add_argument("--poll-s", type=float, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warm-up-s", type=float, default=20.0, help="after the first batch")
    parser.add_argument("--kafka", default="127.0.0.1:19092")
    args = parser.parse_args()

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    topic = f"idle-cost-{os.getpid()}-{time.time_ns() % 10**9}"
    assert kafka_local.create_topic(args.kafka, topic, partitions=1)
    env = dict(os.environ)
    if args.trigger:
        env["ROUTELAKE_KAFKA_TRIGGER_INTERVAL"] = args.trigger
    if args.tick_ms:
        env["ROUTELAKE_COLLECTOR_TICK_INTERVAL_MS"] = str(args.tick_ms)
    if args.poll_s:
        env["ROUTELAKE_SERVE_POLL_INTERVAL_S"] = str(args.poll_s)
    common = ["--kafka", args.kafka, "--topic", topic]
    warehouse = str(WORK / "warehouse")
    procs = {
        "collect": routectl("collect", env, "collect", "--port", "0", *common),
        "run": routectl(
            "run",
            env,
            "run",
            *common,
            "--warehouse",
            warehouse,
            "--checkpoint",
            str(WORK / "checkpoint"),
            "-v",  # the "batch N published" lines counted below
        ),
        "serve": routectl(
            "serve", env, "serve", "--warehouse", warehouse, "--port", "0", "--http-port", "0"
        ),
    }
    try:
        deadline = time.monotonic() + FIRST_BATCH_WAIT_S
        while published_batches(WORK / "run.log") == 0:
            dead = [name for name, p in procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SystemExit(f"no batch published ({dead} exited; logs in {WORK})")
            time.sleep(1)
        time.sleep(args.warm_up_s)
        before = {name: tree_cpu_s(p.pid) for name, p in procs.items()}
        batches_before = published_batches(WORK / "run.log")
        time.sleep(args.seconds)
        after = {name: tree_cpu_s(p.pid) for name, p in procs.items()}
        per_minute = {
            name: round((after[name] - before[name]) * 60 / args.seconds, 1) for name in procs
        }
        print(
            json.dumps(
                {
                    "trigger": args.trigger or "conf",
                    "tick_ms": args.tick_ms or "conf",
                    "poll_s": args.poll_s or "conf",
                    "cpu_s_per_minute": per_minute,
                    "batches": published_batches(WORK / "run.log") - batches_before,
                    "seconds": args.seconds,
                    "load": os.getloadavg()[0],
                }
            )
        )
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
