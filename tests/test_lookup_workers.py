"""`routectl serve --workers 2`, real processes on real sockets: two processes answer on one
remoting port, the primary's /metrics counts both (prometheus_client's multiprocess mode),
/readyz waits for both, SIGTERM stops both; a worker killed between two scrapes takes none of
its counts with it and is replaced by a new process; workers that keep dying are replaced
after a growing back-off."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from routing_lib.lookup.allocator import JEMALLOC_ENV, LOOKUP_JEMALLOC_CONF
from routing_lib.remoting.protocol import RequestCode, ResponseCode
from tests.support.lookup_support import RemotingClient, Warehouse, tables, wait_until
from tests.support.metrics_support import sample
from tests.support.process_support import free_port
from tests.support.prometheus_support import promtool

REPO = Path(__file__).resolve().parents[1]
COUNTED_TYPES = ("counter", "histogram")


def children(pid: int) -> list[int]:
    """Its child processes, alive."""
    try:
        found = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [c for c in found if alive(c)]


def descendants(pid: int) -> list[int]:
    found = children(pid)
    return found + [d for child in found for d in descendants(child)]


def listening_inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on TCP `port` (IPv4)."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    listening = "0A"
    return {r[9] for r in rows if int(r[1].split(":")[1], 16) == port and r[3] == listening}


def holds_socket(pid: int, inodes: set[str]) -> bool:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).removeprefix("socket:[").removesuffix("]") in inodes:
                return True
        except FileNotFoundError:  # closed between the listing and the read
            pass
    return False


def sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except FileNotFoundError:  # closed between the listing and the read
            pass
    return count


def open_files(pid: int) -> list[Path]:
    """The files a process holds open (its multiprocess metrics files among them)."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.append(Path(os.readlink(fd)))
        except FileNotFoundError:  # closed between the listing and the read
            pass
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited


def replaced(lookup: Lookup, worker: int) -> bool:
    """Another worker process is there in place of `worker`."""
    return lookup.workers() not in ([], [worker])


def requests_answered(text: str) -> int:
    counted = "routelake_lookup_requests_total"
    return int(sample(text, counted, protocol="remoting", request="105", code="0") or 0)


def counted_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the lookup's counters and histograms, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("routelake_lookup_") and family.type in COUNTED_TYPES
        for s in family.samples
    }


@dataclass
class Lookup:
    proc: subprocess.Popen[bytes]
    port: int
    http: httpx.Client
    log: str = ""  # its stderr, once stopped

    def metrics(self) -> str:
        return self.http.get("/metrics").text

    def ready(self) -> bool:
        try:
            return self.http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def workers(self) -> list[int]:
        """The processes besides the primary listening on its remoting port."""
        inodes = listening_inodes(self.port)
        return [p for p in descendants(self.proc.pid) if alive(p) and holds_socket(p, inodes)]

    def route_requests(self, count: int) -> dict[int, int]:
        """`count` route requests, each on its own connection, held open until all are
        answered: {process: connections it took}."""
        processes = [self.proc.pid, *self.workers()]
        before = {p: sockets(p) for p in processes}
        clients = [RemotingClient(self.port) for _ in range(count)]
        try:
            for client in clients:
                answer = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Orders")
                assert answer.code == ResponseCode.SUCCESS
            return {p: sockets(p) - n for p, n in before.items()}
        finally:
            for client in clients:
                client.close()


def start_two_workers(warehouse: Path) -> Lookup:
    """`routectl serve --workers 2` on free ports, ready."""
    Warehouse(warehouse).publish(0, 1000, tables())
    port, http_port = free_port(), free_port()
    argv = [sys.executable, "-m", "routing_lib.cli", "serve", "--warehouse", str(warehouse)]
    argv += ["--port", str(port), "--http-port", str(http_port), "--workers", "2"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lookup = Lookup(proc, port, httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=5))
    try:
        wait_until(lookup.ready, timeout=60)
        # ready: the worker serves a snapshot; it listens on the port right after
        wait_until(lambda: len(lookup.workers()) == 1)
    except BaseException:
        ended(lookup, signal.SIGKILL)
        raise
    return lookup


def ended(lookup: Lookup, sig: signal.Signals | None = signal.SIGTERM) -> int:
    """Its exit code, once ended (after `sig`); its stderr in `lookup.log`."""
    lookup.http.close()
    if sig is not None and lookup.proc.poll() is None:
        lookup.proc.send_signal(sig)
    try:
        lookup.proc.wait(30)
    finally:
        if lookup.proc.poll() is None:
            lookup.proc.kill()
    stderr = lookup.proc.stderr
    lookup.log = stderr.read().decode() if stderr else ""
    return lookup.proc.wait()


@contextmanager
def serving_two_workers(warehouse: Path) -> Iterator[Lookup]:
    """`routectl serve --workers 2`, ready; stopped with SIGTERM, which it must exit 0 on."""
    lookup = start_two_workers(warehouse)
    try:
        yield lookup
    finally:
        code = ended(lookup)
    assert code == 0, lookup.log[-2000:]


def test_two_processes_share_the_remoting_port(tmp_path):
    with serving_two_workers(tmp_path) as lookup:
        workers = lookup.workers()
        assert len(workers) == 1
        assert sample(lookup.metrics(), "routelake_lookup_workers", state="ready") == 1
        # serve started again with deltalake's allocator set (allocator.with_jemalloc_conf):
        # the same pid, and its worker forked with it
        for pid in (lookup.proc.pid, *workers):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"{JEMALLOC_ENV}={LOOKUP_JEMALLOC_CONF}".encode() in environ, pid
        # New connections are spread over both processes (SO_REUSEPORT): each process
        # holds some of them open; every one is answered.
        gained = lookup.route_requests(40)
        assert sum(gained.values()) == 40 and all(gained.values()), gained
        # Both processes' counters reach the primary's /metrics (their multiprocess files).
        wait_until(lambda: requests_answered(lookup.metrics()) == 40)
        text = lookup.metrics()
        builds = "routelake_lookup_snapshot_build_duration_seconds_count"
        assert sample(text, builds, kind="full") == 2
        # memory of both processes, summed: more than the primary's alone
        assert sample(text, "routelake_lookup_resident_memory_bytes") > sample(
            text, "process_resident_memory_bytes"
        )
        checked = promtool("check", "metrics", stdin=text.encode())
        assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout
    assert f"route console: http://127.0.0.1:{lookup.http.base_url.port}/" in lookup.log
    # the workers (and the zygote) end with the primary
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(w) for w in workers):
        time.sleep(0.1)
    assert not [w for w in workers if alive(w)]


def test_a_dead_workers_counts_stay_and_a_new_worker_takes_its_place(tmp_path):
    with serving_two_workers(tmp_path) as lookup:
        (worker,) = lookup.workers()
        assert all(lookup.route_requests(40).values())
        for _ in range(10):
            assert lookup.http.get("/topics/Orders/route").status_code == 200
        wait_until(lambda: requests_answered(lookup.metrics()) == 40)
        before = lookup.metrics()

        os.kill(worker, signal.SIGKILL)
        wait_until(lambda: not alive(worker) and not Path(f"/proc/{worker}").exists())
        # the primary has seen the end: the worker no longer counts as ready
        wait_until(lambda: sample(lookup.metrics(), "routelake_lookup_workers", state="ready") != 1)
        after_death = lookup.metrics()
        fallen = {
            key: (value, counted_samples(after_death).get(key))
            for key, value in counted_samples(before).items()
            if counted_samples(after_death).get(key, -1.0) < value
        }
        assert not fallen, fallen
        assert sample(after_death, "routelake_lookup_worker_exits_total") == 1

        # A new process takes the slot; it listens on the port only once it serves the
        # snapshot (until then the kernel gives the primary every new connection).
        wait_until(partial(replaced, lookup, worker), 30)
        assert sample(lookup.metrics(), "routelake_lookup_workers", state="ready") == 1
        (replacement,) = lookup.workers()
        assert lookup.ready()
        gained = lookup.route_requests(40)
        assert gained.get(replacement) and gained[lookup.proc.pid], gained
        after = lookup.metrics()
        assert requests_answered(after) == 80
        for key, value in counted_samples(before).items():
            assert counted_samples(after)[key] >= value, key
    assert f"lookup worker {worker} ended (SIGKILL)" in lookup.log


def test_workers_that_keep_dying_are_replaced_after_a_growing_back_off(tmp_path):
    with serving_two_workers(tmp_path) as lookup:
        (zygote,) = children(lookup.proc.pid)
        waits = []
        for _ in range(3):  # each worker killed as soon as it is forked: a crash loop
            (worker,) = children(zygote)
            os.kill(worker, signal.SIGKILL)
            killed = time.monotonic()
            wait_until(lambda: children(zygote) not in ([], [worker]), timeout=30)  # noqa: B023
            waits.append(time.monotonic() - killed)
        # 1 s, 2 s, 4 s: a worker ended within a minute of its start, three in a row
        for waited, back_off in zip(waits, (1, 2, 4), strict=True):
            assert back_off <= waited < back_off + 2, waits
        text = lookup.metrics()
        assert sample(text, "routelake_lookup_worker_exits_total") == 3
        wait_until(lookup.ready, timeout=30)
    assert lookup.log.count("back-off") == 3, lookup.log[-3000:]


def test_the_lookup_fails_when_the_process_that_forks_its_workers_dies(tmp_path):
    """The zygote gone, no worker can be replaced (and those it forked die with it): the
    lookup exits with an error for its supervisor to restart it, rather than serve on
    alone."""
    lookup = start_two_workers(tmp_path)
    try:
        (worker,) = lookup.workers()
        (zygote,) = [p for p in descendants(lookup.proc.pid) if p != worker]
        os.kill(zygote, signal.SIGKILL)
        code = ended(lookup, sig=None)
    except BaseException:
        ended(lookup, signal.SIGKILL)
        raise
    assert code != 0 and f"worker zygote {zygote} ended" in lookup.log, lookup.log[-2000:]
    wait_until(lambda: not alive(worker))


def test_a_killed_lookup_leaves_no_process_and_no_metrics_files(tmp_path):
    """kill -9 of the primary: its zygote stops the workers and removes the metrics and
    index directories that the primary could not."""
    lookup = start_two_workers(tmp_path)
    try:
        processes = descendants(lookup.proc.pid)
        (worker,) = lookup.workers()
        (directory,) = {f.parent for f in open_files(worker) if f.suffix == ".db"}
        assert Path(directory).is_dir()
        ((index_file, _),) = mapped_files(worker, r"routelake-lookup-index-[^/]+/base-")
    finally:
        ended(lookup, signal.SIGKILL)
    wait_until(lambda: not any(alive(p) for p in processes), timeout=20)
    assert not Path(directory).exists()
    assert not Path(index_file).parent.exists()  # nor the shared index files


def mapped_files(pid: int, pattern: str) -> set[tuple[str, str]]:
    """(path, inode) of the files a process maps whose path matches `pattern`."""
    found = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and re.search(pattern, fields[5]):
            found.add((fields[5].removesuffix(" (deleted)"), fields[4]))
    return found


def test_two_workers_map_one_base_index_and_remove_it_at_the_end(tmp_path):
    """topic_base's index is one file in the service's shared-memory directory that both
    processes map (issue 36): its pages are in memory once; it goes with the service."""
    base_file = r"routelake-lookup-index-[^/]+/base-[^/]+\.arrow"
    with serving_two_workers(tmp_path) as lookup:
        (worker,) = lookup.workers()
        primary = mapped_files(lookup.proc.pid, base_file)
        assert len(primary) == 1 and mapped_files(worker, base_file) == primary
        ((path, _),) = primary
        assert path.startswith("/dev/shm/") or not Path("/dev/shm").is_dir()
        # a batch that changes a topic: both serve it from the same file plus their delta
        Warehouse(tmp_path).publish(1, 2000, tables(orders_queues=3))
        wait_until(lambda: lookup.http.get("/healthz").headers["x-routelake-watermark"] == "2000")
        assert all(lookup.route_requests(10).values())
    assert not Path(path).parent.exists()


_FIRST_SNAPSHOT = """
import sys
from pathlib import Path
import routing_lib.cli, routing_lib.lookup.server  # what `routectl serve` has imported
from routing_lib.lookup.workers import PRELOAD
for module in PRELOAD:
    __import__(module)
before = set(sys.modules)
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.shared_index import SharedIndexes
from routing_lib.lookup.snapshots import next_index
from routing_lib.lookup.processor import answer
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import RequestCode
warehouse, index_dir = sys.argv[1], Path(sys.argv[2])
index = next_index(warehouse, None, settled_versions(warehouse)[0],
                   shared=SharedIndexes(index_dir)).index
index.route_count, index.broker_topic_counts
for code, fields in ((RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}),
                     (RequestCode.GET_BROKER_CLUSTER_INFO, {})):
    answer(index, RemotingCommand(code=code, ext_fields=fields))
print(" ".join(sorted(set(sys.modules) - before)))
"""


def test_a_worker_imports_nothing_on_its_first_snapshot_the_zygote_lacks(tmp_path):
    """The modules a process imports on its first Delta read and answers (pandas and
    ~350 more, ~25 MB) are imported before the zygote forks (workers.PRELOAD): the workers
    share those pages with it instead of each importing its own copy."""
    Warehouse(tmp_path / "wh").publish(0, 1000, tables())
    (tmp_path / "index").mkdir()
    run = subprocess.run(
        [sys.executable, "-c", _FIRST_SNAPSHOT, str(tmp_path / "wh"), str(tmp_path / "index")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [], run.stdout


_INTERRUPTED_DURING_THE_FORK = """
import os, signal, sys
from pathlib import Path
from routing_lib.lookup.workers import Workers
# Ctrl-C arriving while os.fork runs its at-fork hooks (as it did once in CI, in logging's)
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
workers = Workers(0, Path(sys.argv[1]))
try:
    workers.start_zygote([], start_worker=lambda zygote: os._exit(0))
except KeyboardInterrupt:
    workers.stop()
    print("interrupted")
    sys.exit(0)
workers.stop()
print("the interrupt was lost")
sys.exit(3)
"""


def test_ctrl_c_during_the_zygotes_fork_stops_the_primary(tmp_path):
    """A SIGINT delivered during the fork must still raise KeyboardInterrupt in the primary,
    not vanish inside an at-fork hook (the primary then served on after Ctrl-C); the zygote
    ends with the primary. CPU: one interpreter importing PRELOAD, ~2 s."""
    run = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_DURING_THE_FORK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.stdout.strip() == "interrupted", run.stdout + run.stderr
    assert run.returncode == 0
