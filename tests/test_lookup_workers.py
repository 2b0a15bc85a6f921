"""`routectl serve --workers 2`: two processes answer on one remoting port, the primary's
/metrics counts both, /readyz waits for both, SIGTERM stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from routing_lib.remoting.protocol import RequestCode, ResponseCode
from tests.support.lookup_support import RemotingClient, Warehouse, tables, wait_until
from tests.support.metrics_support import sample
from tests.support.process_support import free_port

REPO = Path(__file__).resolve().parents[1]


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except FileNotFoundError:  # closed between the listing and the read
            pass
    return count


def requests_answered(text: str) -> int:
    counted = "routelake_lookup_requests_total"
    return int(sample(text, counted, protocol="remoting", request="105", code="0") or 0)


def test_two_processes_share_the_remoting_port(tmp_path):
    Warehouse(tmp_path).publish(0, 1000, tables())
    port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "routing_lib.cli",
            "serve",
            "--warehouse",
            str(tmp_path),
            "--port",
            str(port),
            "--http-port",
            str(http_port),
            "--workers",
            "2",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=5)

    def ready() -> bool:
        try:
            return http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(ready, timeout=60)
        workers = children(proc.pid)
        assert len(workers) == 1
        assert sample(http.get("/metrics").text, "routelake_lookup_workers", state="ready") == 1
        # New connections are spread over both processes (SO_REUSEPORT): each process
        # holds some of them open; every one is answered.
        before = {p: sockets(p) for p in (proc.pid, *workers)}
        clients = [RemotingClient(port) for _ in range(40)]
        for client in clients:
            assert (
                client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders").code
                == ResponseCode.SUCCESS
            )
        gained = {p: sockets(p) - n for p, n in before.items()}
        for client in clients:
            client.close()
        assert sum(gained.values()) == 40 and all(gained.values()), gained
        # Both processes' counters reach the primary's /metrics (reported every second).
        wait_until(lambda: requests_answered(http.get("/metrics").text) == 40, timeout=10)
        text = http.get("/metrics").text
        builds = "routelake_lookup_snapshot_build_duration_seconds_count"
        assert sample(text, builds, kind="full") == 2
        # memory of both processes, summed: more than the primary's alone
        assert sample(text, "routelake_lookup_resident_memory_bytes") > sample(
            text, "process_resident_memory_bytes"
        )
    finally:
        http.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 0, err[-2000:]
    assert f"route console: http://127.0.0.1:{http_port}/" in err  # printed without -v
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
        time.sleep(0.1)
    assert not [w for w in workers if Path(f"/proc/{w}").exists() and _alive(w)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; its parent (gone) would have reaped it
