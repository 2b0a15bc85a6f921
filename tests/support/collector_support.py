"""Start and stop a real `routectl collect` process (the collector tests and bench use it)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start_collector(
    bootstrap: str, topic: str, log: Path, *extra_args: str
) -> tuple[subprocess.Popen, int]:
    """The collector on an ephemeral loopback port, logging to `log`: (process, port)."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "routing_lib.cli",
                "collect",
                "--port",
                "0",
                "--kafka",
                bootstrap,
                "--topic",
                topic,
                *extra_args,
                "-v",
            ],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 60
    while not (m := re.search(r"remoting on 127\.0\.0\.1:(\d+)", log.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_collector(proc)
            raise RuntimeError(f"collector did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, int(m[1])


def stop_collector(proc: subprocess.Popen) -> None:
    """SIGTERM (a clean shutdown), SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
