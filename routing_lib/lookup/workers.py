"""Several processes answering on one remoting port (`routectl serve --workers N`).

One Python process answers on one core; the Java NameServer uses all of them. Here the
first process (the primary) binds the remoting port with SO_REUSEPORT and serves it and
HTTP; N-1 worker processes each bind their own SO_REUSEPORT socket on the same port, so the
kernel spreads new connections over the N processes. Each process has its own refresher and
index (built from the change feed, so a snapshot costs each process what changed); the big
part, topic_base's index, is a file in a directory of this service in /dev/shm that every
process maps (shared_index.py), so it is in memory once.

Workers are forked by a *zygote*: a process the primary forks first, before it has an event
loop or a thread, which does nothing but fork a worker when the primary asks and report the
workers that end. The primary itself cannot fork once it serves (its threads, delta-rs'
runtime among them, would be missing in the child, their locks perhaps held), and a fresh
interpreter could not inherit the listeners' TLS contexts; the zygote is the primary as it was
at start. Workers die with the zygote and the zygote with the primary (PR_SET_PDEATHSIG); on
SIGTERM the primary closes the zygote's channel and the zygote stops the workers.

A worker listens on the port only once it serves a snapshot (LookupService, http=False):
until then the kernel gives new connections to the processes that can answer them.

A worker that ends is replaced in its slot, as gunicorn-style supervisors do: at once if it
had run STABLE_AFTER_S, else after a back-off that doubles with each worker of that slot that
ended within STABLE_AFTER_S of its start (1 s, 2 s, 4 s ... at most 60 s). Each end is logged
and counted (routelake_lookup_worker_exits_total).

Metrics: prometheus_client's multiprocess mode. This serve process makes a fresh
PROMETHEUS_MULTIPROC_DIR, every process writes its values there, and the primary's /metrics
reads them all; the directory goes at exit (the zygote removes it if the primary was killed).
A dead worker's counters and histograms stay in its files, so no counter falls when a worker
dies; its live gauges (connections, memory, readiness) are dropped with mark_process_dead.
/readyz answers 503 until every worker slot has a process that serves a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import importlib
import logging
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from prometheus_client import values
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import mark_process_dead

from routing_lib.lookup.shared_index import DIR_ENV, SharedIndexes
from routing_lib.remoting.service import serve_until_signal
from routing_lib.remoting.service_metrics import MULTIPROC_ENV, Metrics

log = logging.getLogger("routelake.lookup")
PR_SET_PDEATHSIG = 1
STABLE_AFTER_S = 60.0  # a worker that ran this long ended by accident: replaced at once
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
REAP_INTERVAL_S = 0.1  # how often the zygote looks for ended workers
STOP_TIMEOUT_S = 15.0
# Held (blocked) across the primary's fork of the zygote: a signal that arrives during os.fork
# would otherwise run its Python handler inside an at-fork hook (logging's lock release), where
# an exception such as Ctrl-C's KeyboardInterrupt is printed and dropped; the primary would
# serve on, stopped by nothing. Held, it is delivered when the fork has returned.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP, signal.SIGTERM})
WORKERS_TASK = "lookup-workers"  # the primary's background task that supervises them
# What every process imports on its first Delta read (delta-rs' pyarrow dataset: pandas,
# dateutil, pytz ... ~350 modules, ~25 MB): imported before the zygote is forked, so the
# workers share those pages instead of each importing its own copy.
PRELOAD = ("pyarrow.dataset", "pyarrow.parquet", "pandas", "deltalake.fs")

Runner = Callable[[Coroutine[Any, Any, None]], None]
# Builds the service a process serves (server.py passes LookupService): taking the factory keeps
# this module free of the server's import, which imports this one to start the workers.
ServiceFactory = Callable[..., Any]


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket with SO_REUSEPORT: several may listen on one port."""
    sock = socket.create_server((host, port), reuse_port=True)
    sock.setblocking(False)
    return sock


def bound_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound with SO_REUSEPORT, not listening: the kernel gives it none of the
    port's connections until it listens (a worker, once it serves a snapshot)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def backoff_s(quick_ends: int) -> float:
    """How long a slot waits before its next worker, after `quick_ends` workers in a row
    ended within STABLE_AFTER_S of their start: 0, then 1, 2, 4 ... BACKOFF_MAX_S."""
    if quick_ends <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** (quick_ends - 1))


@contextlib.contextmanager
def multiprocess_metrics() -> Iterator[Path]:
    """A fresh PROMETHEUS_MULTIPROC_DIR for this process and the ones it forks, removed at
    exit. Call before creating any metric."""
    directory = Path(tempfile.mkdtemp(prefix="routelake-lookup-metrics-"))
    previous_env, previous_class = os.environ.get(MULTIPROC_ENV), values.ValueClass
    os.environ[MULTIPROC_ENV] = str(directory)
    # prometheus_client picks its value class from the variable when first imported, which
    # happened before the directory existed: pick again, as that import does.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
    try:
        yield directory
    finally:
        values.ValueClass = previous_class
        if previous_env is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous_env
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def shared_index_dir() -> Iterator[Path]:
    """The base index files' directory every process of this service maps (in /dev/shm:
    shared_index.py), named to the processes it forks by DIR_ENV; removed at exit."""
    shared = SharedIndexes.create()
    previous = os.environ.get(DIR_ENV)
    os.environ[DIR_ENV] = str(shared.directory)
    try:
        yield shared.directory
    finally:
        if previous is None:
            os.environ.pop(DIR_ENV, None)
        else:
            os.environ[DIR_ENV] = previous
        shared.remove()


def _die_with_parent(parent: int) -> None:
    """SIGTERM when `parent` ends; at once if it ended before this asked."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _leave_group_signals_to_the_primary() -> None:
    """Ctrl-C (SIGINT) and a closed terminal (SIGHUP) reach every process of the group: the
    primary stops, and stops the zygote and the workers in order."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def _fork_holding_stop_signals() -> tuple[int, set[int | signal.Signals]]:
    """os.fork with STOP_SIGNALS blocked across it, and the mask from before. The parent has
    its mask back when this returns (a signal held during the fork is raised then); the child
    keeps them blocked until it restores the mask, once its own handlers are in place."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    if pid != 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pid, mask


def _exit_description(code: int) -> str:
    """os.waitstatus_to_exitcode's value in words: `exit 1`, `SIGKILL`."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
        return f"signal {-code}"
    return f"exit {code}"


# -- the worker process --


def _run_worker(
    zygote: int,
    warehouse: str | Path,
    options: dict[str, Any],
    port: int,
    runner: Runner,
    make_service: ServiceFactory,
) -> NoReturn:
    """In a worker (the zygote's child): serve remoting until SIGTERM, then exit."""
    code = 0
    try:
        # Ctrl-C and a terminal's hangup reach the whole process group: the primary stops
        # the workers (SIGTERM), after which nothing replaces them.
        _leave_group_signals_to_the_primary()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _die_with_parent(zygote)
        sock = bound_port_socket(options["host"], port)
        service = make_service(
            warehouse, **{**options, "port": port}, remoting_socket=sock, http=False
        )
        runner(serve_until_signal(service, signals=(signal.SIGTERM,)))
    except BaseException:  # noqa: BLE001  whatever ends a worker, it must not return
        log.exception("lookup worker %d failed", os.getpid())
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# -- the zygote process --


class _Stop(Exception):
    """SIGTERM in the zygote."""


class _Zygote:
    """Forks a worker for each `start SLOT` line from the primary, answers `started SLOT PID`;
    reports each worker that ends as `ended PID EXITCODE`. Single-threaded, no event loop."""

    def __init__(
        self,
        channel: socket.socket,
        start_worker: Callable[[int], NoReturn],
        primary: int,
        signal_mask: Iterable[int] = (),
    ) -> None:
        self.channel = channel
        self.start_worker = start_worker
        self.primary = primary
        self.signal_mask = set(signal_mask)  # the primary's mask before it held STOP_SIGNALS
        self.children: set[int] = set()
        self.stopping = False

    def main(self) -> NoReturn:
        code = 0
        try:
            _leave_group_signals_to_the_primary()
            signal.signal(signal.SIGTERM, self._on_terminate)
            signal.pthread_sigmask(signal.SIG_SETMASK, self.signal_mask)  # handlers in place
            _die_with_parent(self.primary)
            self._serve()
        except _Stop:
            pass
        except BaseException:  # noqa: BLE001  the zygote must not return into the primary
            log.exception("lookup worker zygote %d failed", os.getpid())
            code = 1
        self.stopping = True  # a SIGTERM from now on changes nothing
        try:
            self._stop_children()
            if os.getppid() != self.primary:  # killed: it cannot remove its directories
                shutil.rmtree(os.environ.get(MULTIPROC_ENV, ""), ignore_errors=True)
                shutil.rmtree(os.environ.get(DIR_ENV, ""), ignore_errors=True)
        finally:
            sys.stderr.flush()
            os._exit(code)

    def _on_terminate(self, signum: int, frame: object) -> None:
        """SIGTERM (the primary's death among others): stop, once."""
        if not self.stopping:
            self.stopping = True
            raise _Stop

    def _serve(self) -> None:
        """Until the primary closes the channel."""
        pending = b""
        while True:
            readable, _, _ = select.select([self.channel], [], [], REAP_INTERVAL_S)
            self._reap()
            if not readable:
                continue
            data = self.channel.recv(4096)
            if not data:
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                verb, slot = line.decode().split()
                if verb == "start":
                    self._send(f"started {int(slot)} {self._fork()}")

    def _fork(self) -> int:
        zygote = os.getpid()
        pid, mask = _fork_holding_stop_signals()
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self.channel.close()
            self.start_worker(zygote)
        self.children.add(pid)
        return pid

    def _reap(self) -> None:
        while self.children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            self.children.discard(pid)
            self._send(f"ended {pid} {os.waitstatus_to_exitcode(status)}")

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError):  # the primary gone or stopping: nobody to tell
            self.channel.sendall(line.encode() + b"\n")

    def _stop_children(self) -> None:
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


# -- the primary's side --


def _when_replaced(slot: _Slot) -> str:
    if not slot.waiting_s:
        return "now"
    return (
        f"in {slot.waiting_s:g} s (back-off: {slot.quick_ends} worker(s) of this slot in a row "
        f"ended within {STABLE_AFTER_S:g} s of starting)"
    )


@dataclass
class _Slot:
    """One worker's place: its process, and how often its workers ended soon after start."""

    pid: int | None = None
    started_at: float = 0.0
    quick_ends: int = 0
    waiting_s: float = 0.0  # the back-off before its next worker, while it waits


class Workers:
    """The primary's side: the zygote, a slot per worker, replacing workers that end, and
    what /readyz and /metrics show of them (a WorkerPool of service_metrics)."""

    def __init__(
        self, count: int, metrics_dir: Path, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.slots = [_Slot() for _ in range(count)]
        self.metrics_dir = metrics_dir
        self.metrics: Metrics | None = None
        self.clock = clock
        self.exits = 0
        self.stopping = False
        self.lost = False  # the zygote ended while the service ran
        self.zygote_pid = 0
        self.channel: socket.socket | None = None
        self._writer: asyncio.StreamWriter | None = None

    def start_zygote(
        self, listening: Iterable[socket.socket], start_worker: Callable[[int], NoReturn]
    ) -> None:
        """Fork the zygote (only before this process starts an event loop or a thread)."""
        ours, theirs = socket.socketpair()
        primary = os.getpid()
        for module in PRELOAD:
            importlib.import_module(module)
        # the objects made so far (the imported modules: ~60 MB) move out of the cyclic
        # GC's reach: its passes would write to every one of them, copying each page the
        # zygote and the workers share with this process into each of them
        gc.freeze()
        pid, mask = _fork_holding_stop_signals()
        if pid == 0:  # the zygote: not the primary's sockets; unblocks in main()
            for sock in [ours, *listening]:
                sock.close()
            _Zygote(theirs, start_worker, primary, mask).main()
        theirs.close()
        self.zygote_pid, self.channel = pid, ours

    def report_to(self, metrics: Metrics) -> None:
        """Show the workers in the primary's /readyz and /metrics."""
        self.metrics = metrics
        metrics.attach(self)

    async def supervise(self) -> None:
        """Start a worker in every slot, then replace each that ends, until cancelled."""
        assert self.channel is not None, "start_zygote first"
        reader, self._writer = await asyncio.open_connection(sock=self.channel)
        for slot in range(len(self.slots)):
            self._request(slot)
        try:
            while line := await reader.readline():
                verb, *numbers = line.decode().split()
                if verb == "started":
                    self._started(int(numbers[0]), int(numbers[1]))
                elif verb == "ended":
                    self._ended(int(numbers[0]), int(numbers[1]))
        finally:  # ended or cancelled (the service stops): nothing is replaced from now on
            self.stopping = True
        # the zygote is gone, its workers with it (PR_SET_PDEATHSIG): nothing can replace them
        self.lost = True
        raise RuntimeError(f"the lookup's worker zygote {self.zygote_pid} ended")

    def _request(self, slot: int) -> None:
        if self._writer is not None and not self.stopping:
            self._writer.write(f"start {slot}\n".encode())

    def _started(self, slot: int, pid: int) -> None:
        self.slots[slot] = _Slot(pid, self.clock(), self.slots[slot].quick_ends)
        log.info("lookup worker %d started (slot %d)", pid, slot)

    def _ended(self, pid: int, code: int) -> None:
        # its live gauges go, its counts stay
        mark_process_dead(pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
        found = [i for i, s in enumerate(self.slots) if s.pid == pid]
        if not found or self.stopping:
            return
        slot = self.slots[found[0]]
        lived = self.clock() - slot.started_at
        self.exits += 1
        slot.pid = None
        slot.quick_ends = 0 if lived >= STABLE_AFTER_S else slot.quick_ends + 1
        slot.waiting_s = backoff_s(slot.quick_ends)
        log.error(
            "lookup worker %d ended (%s) after %.1f s; replacing it %s",
            pid,
            _exit_description(code),
            lived,
            _when_replaced(slot),
        )
        asyncio.get_running_loop().call_later(slot.waiting_s, self._request, found[0])

    def hang_up(self) -> None:
        """On the event loop, at the end: close the zygote's channel (it stops the workers)."""
        self.stopping = True
        if self._writer is not None:
            self._writer.close()

    def stop(self) -> None:
        """Close the zygote's channel if still open, wait for the zygote (and its workers)."""
        self.stopping = True
        if self.channel is None:
            return
        self.channel.close()
        deadline = time.monotonic() + STOP_TIMEOUT_S + 5
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(self.zygote_pid, os.WNOHANG)[0] == 0:
                    time.sleep(0.05)
                    continue
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.zygote_pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.zygote_pid, 0)

    # -- what the primary's /readyz and /metrics show (service_metrics.WorkerPool) --

    def _ready(self) -> int:
        serving = self.metrics.processes_with_snapshot() if self.metrics else set()
        return sum(1 for s in self.slots if s.pid is not None and s.pid in serving)

    def loading(self) -> int:
        return len(self.slots) - self._ready()

    def families(self) -> Iterable[Metric]:
        p = self.metrics.prefix if self.metrics else "routelake_lookup"
        workers = GaugeMetricFamily(
            f"{p}_workers",
            "Worker processes on the remoting port besides the primary, by state: ready "
            "(serving a snapshot), loading (starting, loading, or waiting to be replaced).",
            labels=["state"],
        )
        ready = self._ready()
        workers.add_metric(["ready"], ready)
        workers.add_metric(["loading"], len(self.slots) - ready)
        yield workers
        yield CounterMetricFamily(
            f"{p}_worker_exits",
            "Worker processes that ended while the service ran (each is replaced).",
            value=self.exits,
        )
        yield GaugeMetricFamily(
            f"{p}_worker_restart_backoff_seconds",
            "The longest back-off a worker slot waits out before its next worker "
            "(0: none waiting).",
            value=max((s.waiting_s for s in self.slots if s.pid is None), default=0.0),
        )


def serve_workers(
    warehouse: str | Path,
    count: int,
    options: dict[str, Any],
    runner: Runner,
    make_service: ServiceFactory,
) -> None:
    """The primary: bind, fork the zygote, serve (HTTP too) while count-1 workers serve the
    remoting port beside it, until SIGTERM; then stop them."""
    with multiprocess_metrics() as metrics_dir, shared_index_dir():
        sock = shared_port_socket(options["host"], options["port"])
        port = sock.getsockname()[1]

        def start_worker(zygote: int) -> NoReturn:
            _run_worker(zygote, warehouse, options, port, runner, make_service)

        workers = Workers(count - 1, metrics_dir)
        try:
            workers.start_zygote([sock], start_worker)  # before any event loop or thread
            service = make_service(warehouse, **{**options, "port": port}, remoting_socket=sock)
            workers.report_to(service.metrics)
            log.info("lookup service: %d processes on remoting port %d", count, port)
            runner(_primary(service, workers))
        finally:
            workers.stop()


async def _primary(service: Any, workers: Workers) -> None:
    # a background task of the service: the service stops if it fails (the zygote died)
    service.in_background(workers.supervise(), WORKERS_TASK)
    try:
        await serve_until_signal(service)
    finally:
        workers.hang_up()
    if workers.lost:
        raise RuntimeError(f"the lookup's worker zygote {workers.zygote_pid} ended")
