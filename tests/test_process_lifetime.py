"""Processes die with what started them: run under a pseudo-terminal as a person would, stopped
by Ctrl-C (also in a pipeline), SIGTERM, a hangup (the terminal closed) or kill -9, within 15 s no
process of the run is left: not the Spark JVM, not its Python workers, not the demo's Kafka.
Every process of a run is found by a marker in its environment (inherited all the way down)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.helpers import fixture_lines
from tests.support.process_support import (
    MARKER_VAR,
    VENV_BIN,
    TerminalRun,
    free_kafka_port,
    free_port,
    kill_marked,
    marked_processes,
    parent_pid,
    wait_all_gone,
)

ROOT = Path(__file__).resolve().parent.parent
WITHIN_S = 15.0
STARTUP_S = 600.0  # a Spark job's first batch, on a loaded CI machine
ROUTECTL = str(VENV_BIN / "routectl")
# Spark's Python worker daemon: pyspark's own, or routelake's preloading one (local masters,
# routing_lib/spark/session.py's WORKER_DAEMON; named here, so that collecting this module
# imports no pyspark). The workers are its forks and carry its command line.
PYTHON_DAEMONS = ("pyspark.daemon", "routing_lib.spark.worker_daemon")


def assert_nothing_left(run: TerminalRun, before: dict[int, str]) -> float:
    """Within WITHIN_S no marked process is left; prints how long it took (pytest -s)."""
    elapsed, left = wait_all_gone(run.marker, WITHIN_S)
    assert not left, f"still running {elapsed:.1f} s later: {left}\n{run.output[-2000:]}"
    print(f"{len(before)} processes, all gone {elapsed:.1f} s after the stop")
    return elapsed


def stop(run: TerminalRun, how: str) -> None:
    if how == "ctrl-c":
        run.ctrl_c()
    elif how == "hangup":
        run.hangup()
    elif how == "sigterm":
        run.process.send_signal(signal.SIGTERM)
    elif how == "kill-9":
        run.process.send_signal(signal.SIGKILL)
    else:
        raise ValueError(how)


# ---- the mechanism -----------------------------------------------------------------------------

_PARENT = """
import subprocess, sys, time
from routing_lib import lifeline
preexec = lifeline.die_with_parent() if sys.argv[1] == "lifeline" else None
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True, preexec_fn=preexec)
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("lifeline", [True, False])
def test_a_child_in_its_own_session_dies_with_a_killed_parent(lifeline):
    """The control (no lifeline) shows what the test would catch: an orphan."""
    marker = uuid.uuid4().hex
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, "lifeline" if lifeline else "plain"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, MARKER_VAR: marker},
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert child in marked_processes(marker)
        parent.kill()
        parent.wait()
        elapsed, left = wait_all_gone(marker, 3.0)
        assert (left == {}) is lifeline, left
    finally:
        kill_marked(marker)


# ---- commands without children of their own: they end on every stop signal --------------------


def _service_env() -> dict[str, str]:
    return {
        **os.environ,
        "ROUTELAKE_SERVE_PORT": str(free_port()),
        "ROUTELAKE_SERVE_HTTP_PORT": str(free_port()),
        "ROUTELAKE_COLLECTOR_PORT": str(free_port()),
    }


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "hangup"])
@pytest.mark.parametrize("command", ["serve", "collect"])
def test_serve_and_collect_end_on_every_stop(command, how, tmp_path, kafka_bootstrap):
    env = _service_env()
    argv = [ROUTECTL, command]
    argv += ["--warehouse", str(tmp_path / "warehouse")] if command == "serve" else []
    port = int(env["ROUTELAKE_SERVE_PORT" if command == "serve" else "ROUTELAKE_COLLECTOR_PORT"])
    run = TerminalRun(argv, env, ROOT)
    try:
        _wait_listening(run, port, 60.0)
        before = marked_processes(run.marker)
        stop(run, how)
        assert_nothing_left(run, before)
    finally:
        run.close()


def _wait_listening(run: TerminalRun, port: int, timeout_s: float) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if run.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"nothing listens on {port}:\n{run.output[-2000:]}") from None
            time.sleep(0.2)


def test_kafka_start_stops_the_broker_it_is_still_starting(tmp_path):
    """`routectl kafka start` detaches the broker on purpose once it answers; stopped before
    that (SIGTERM; a hangup is the same), it takes the broker with it."""
    env = {
        **os.environ,
        "ROUTELAKE_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_kafka_port()}",
        "ROUTELAKE_KAFKA_DATA_DIR": str(tmp_path / "kafka"),
    }
    run = TerminalRun([ROUTECTL, "kafka", "start", "--no-topic"], env, ROOT)
    try:
        run.wait_for_process("kafka.Kafka", 120.0)
        before = marked_processes(run.marker)
        stop(run, "sigterm")
        assert_nothing_left(run, before)
        assert run.process.wait(5) == 128 + signal.SIGTERM
    finally:
        run.close()


# ---- routectl run: the driver, the Spark JVM, Spark's Python workers ---------------------------


@pytest.fixture(scope="module")
def events_topic(kafka_bootstrap) -> str:
    """A topic holding a golden fleet, so the job's Python workers are busy once it starts."""
    from kafka import KafkaProducer

    from routelake_dev import kafka_local

    topic = f"lifetime-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(kafka_bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for line in fixture_lines("20_random_fleet_seed101"):
        key = json.loads(line).get("brokerName", "").encode()
        producer.send(topic, key=key, value=line.encode())
    producer.flush()
    producer.close()
    return topic


@pytest.mark.spark
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "hangup", "kill-9"])
def test_routectl_run_and_its_spark_processes_end(how, events_topic, tmp_path):
    argv = [ROUTECTL, "run", "-v", "--topic", events_topic, "--trigger-interval", "1 second"]
    argv += ["--warehouse", str(tmp_path / "warehouse")]
    argv += ["--checkpoint", str(tmp_path / "checkpoint")]
    run = TerminalRun(argv, dict(os.environ, ROUTELAKE_DRIVER_MEMORY="1g"), ROOT)
    try:
        run.wait_for("published", STARTUP_S)  # a batch ran: the Python workers exist
        before = _python_workers_running(run, 10.0)
        assert any("org.apache.spark" in cmd for cmd in before.values()), before
        stop(run, how)
        assert_nothing_left(run, before)
    finally:
        run.close()


def _python_workers_running(run: TerminalRun, timeout_s: float) -> dict[int, str]:
    """The run's marked processes once a Python worker daemon (either module) runs with at
    least one worker forked from it: what the stop must end besides the JVM."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = marked_processes(run.marker)
        daemons = {pid for pid, cmd in found.items() if any(d in cmd for d in PYTHON_DAEMONS)}
        if any(parent_pid(pid) in daemons for pid in daemons):
            return found
        if run.process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"no Python worker forked from {PYTHON_DAEMONS}: {found}\n{run.output[-3000:]}"
            )
        time.sleep(0.2)


# ---- the demo ----------------------------------------------------------------------------------


def _demo_env(tmp_path: Path) -> dict[str, str]:
    """Its own Kafka broker (so that the test sees it end too) and its own ports."""
    return {
        **_service_env(),
        "ROUTELAKE_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_kafka_port()}",
        "ROUTELAKE_KAFKA_DATA_DIR": str(tmp_path / "kafka"),
        "ROUTELAKE_DRIVER_MEMORY": "1g",
    }


DEMO_ARGS = ["--brokers", "3", "--topics", "4"]


def _demo_running(run: TerminalRun) -> dict[int, str]:
    run.wait_for("watermark lag", STARTUP_S)  # a refresh with published tables
    for part in ("kafka.Kafka", "org.apache.spark", "routing_lib.cli serve"):
        run.wait_for_process(part, 60.0)
    return _python_workers_running(run, 60.0)


@pytest.mark.spark
def test_demo_in_a_pipeline_ends_on_ctrl_c(tmp_path):
    """`scripts/demo.sh | tee demo.log`, then Ctrl-C: tee dies of it too, and the demo's
    stdout is a broken pipe while it stops everything."""
    work = tmp_path / "demo"
    command = f"scripts/demo.sh --work-dir {work} {' '.join(DEMO_ARGS)} | tee {tmp_path}/demo.log"
    run = TerminalRun(["bash", "-c", command], _demo_env(tmp_path), ROOT)
    try:
        before = _demo_running(run)
        stop(run, "ctrl-c")
        assert_nothing_left(run, before)
        assert "watermark lag" in (tmp_path / "demo.log").read_text()
    finally:
        run.close()


@pytest.mark.spark
def test_demo_killed_with_kill_9_takes_everything_with_it(tmp_path):
    argv = [ROUTECTL, "demo", "--work-dir", str(tmp_path / "demo"), *DEMO_ARGS]
    run = TerminalRun(argv, _demo_env(tmp_path), ROOT)
    try:
        before = _demo_running(run)
        stop(run, "kill-9")
        assert_nothing_left(run, before)
    finally:
        run.close()
