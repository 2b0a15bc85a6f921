"""Run a command under a pseudo-terminal, as a person would in a terminal, and find every process
it started (however far down, in whatever session) by a marker in their environment."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import subprocess
import termios
import threading
import time
import uuid
from pathlib import Path

MARKER_VAR = "ROUTELAKE_TEST_RUN"
VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_kafka_port() -> int:
    """A free port whose next one is free too: a local Kafka broker's controller listens on
    the port after its own (routelake_dev.kafka_local), and refuses to start when it is taken."""
    while True:
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except (OSError, OverflowError):  # taken, or past the last port
                continue
        return port


def parent_pid(pid: int) -> int:
    """The parent of `pid`, 0 once it is gone (the field after the command's parenthesis)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def marked_processes(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment carries the marker (the
    environment is inherited: the JVMs and Spark's Python workers carry it too). Zombies have
    no environment left: they have ended."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found[int(entry.name)] = cmdline.strip()
        except OSError:  # gone meanwhile, or not ours
            continue
    return found


def wait_all_gone(marker: str, within_s: float) -> tuple[float, dict[int, str]]:
    """Seconds until no marked process was left (or within_s), and what was left then."""
    started = time.monotonic()
    while True:
        left = marked_processes(marker)
        elapsed = time.monotonic() - started
        if not left or elapsed >= within_s:
            return elapsed, left
        time.sleep(0.2)


def kill_marked(marker: str) -> None:
    """Test cleanup: whatever a failed test left behind."""
    for pid in marked_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class TerminalRun:
    """`argv` as the session leader of a new pseudo-terminal (its controlling terminal), its
    output read continuously (a terminal nobody reads would block the writer)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.marker = uuid.uuid4().hex
        self.master, slave = os.openpty()
        self._output = bytearray()
        self._lock = threading.Lock()
        self._closing = threading.Event()

        def become_terminal_session() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env={**env, MARKER_VAR: self.marker},
            preexec_fn=become_terminal_session,
        )
        os.close(slave)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        # Polls: a read blocked on the master would keep the terminal open after hangup().
        while not self._closing.is_set():
            if not select.select([self.master], [], [], 0.1)[0]:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO once every writer closed the terminal
                return
            if not chunk:
                return
            with self._lock:
                self._output += chunk

    @property
    def output(self) -> str:
        with self._lock:
            return self._output.decode(errors="replace")

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"exited ({self.process.returncode}) before {text!r}:\n{self.output[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout_s} s:\n{self.output[-3000:]}")
            time.sleep(0.2)

    def wait_for_process(self, fragment: str, timeout_s: float) -> None:
        """Until a marked process whose command line holds `fragment` runs."""
        deadline = time.monotonic() + timeout_s
        while not any(fragment in cmd for cmd in marked_processes(self.marker).values()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"no process running {fragment!r}: {marked_processes(self.marker)}\n"
                    f"{self.output[-3000:]}"
                )
            time.sleep(0.2)

    def ctrl_c(self) -> None:
        """What the terminal does on Ctrl-C: SIGINT to its foreground process group."""
        os.write(self.master, b"\x03")

    def hangup(self) -> None:
        """Close the terminal (a closed window, `tmux kill-session`): the kernel sends SIGHUP to
        its session leader."""
        self._closing.set()
        self._reader.join()
        os.close(self.master)
        self.master = -1

    def close(self) -> None:
        kill_marked(self.marker)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.master >= 0:
            self._closing.set()
            self._reader.join()
            os.close(self.master)
            self.master = -1
