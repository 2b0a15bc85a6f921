"""The lookup's view of a network partition, for `bench.stream_bench realtime --partition-at`.

Issue 36 asks that a lookup running beside the job stop serving the broker groups a partition
cut off within 15 s of their expiry deadline, and serve them again within 15 s of their return.
`LookupWatch` starts `routectl serve` on the bench's warehouse once the job has published,
then polls, for every cut-off group, the route of the one topic only that group holds (the
simulator gives each group a topic named after it) and records when it stopped and started
being served.

A group's expiry deadline is the latest (last event sent + heartbeat timeout) over its
brokers, in event time, mapped to the bench's clock (the fleet sends each event when the
wall clock reaches its eventTime; if it falls behind, that shows as a later "gone" and in the
fleet's lag printed beside it). A group whose deadline falls after the partition's end never
expires and is left out. Its return is when Kafka acknowledged its first REGISTER after the
partition that brings its topics back: its master's, or a slave's where acting master is
enabled (the prime slave's configs are set without the write bit; RocketMQ takes no topic
config from other slaves); before the acknowledgement the job cannot read it, however late
the fleet sent it. "back" is the
first poll after "gone" that finds the group served again.

The watch polls the cut-off groups' topics in turn, then sleeps POLL_PAUSE_S: a "gone" or
"back" is seen up to one sweep late, and the report prints the longest sweep. A group is polled
only while its change can happen: before the partition until first seen, from a second before
its expiry deadline until gone, from Kafka's acknowledgement of its return until back. Before,
every cut-off group was polled back to back (a 0.25 s pause per sweep) through the whole
partition and return, on the two cores the job needs, in exactly the minutes measured (its
request rate was not measured).

Each delay is split where the job published it (route_progress's first commit whose watermark
passed the deadline, or reached the return's eventTime): the job's part (the watermark delay,
the batches) and the lookup's (its refresh, plus this watch's poll).
"""

from __future__ import annotations

import http.client
import multiprocessing
import queue
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fleet_process import brings_routes_back
from bench.lookup_bench import free_port, serve_argv

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT_MS = 120_000
POLL_PAUSE_S = 0.25
GONE_LEAD_S = 1.0  # a seen group is polled from this long before its expiry deadline


@dataclass
class _GroupTimes:
    """One cut-off group, on the bench's monotonic clock."""

    deadline: float | None = None  # when its last broker's heartbeat timeout ran out
    deadline_ms: int | None = None  # the same, in event time
    returned_ms: int | None = None  # eventTime of its first REGISTER after it bringing routes
    returned: float | None = None  # Kafka acknowledged that REGISTER
    returned_due: float | None = None  # when that REGISTER was due on the fleet's clock
    seen_at: float | None = None  # first poll that found its topic served
    gone_at: float | None = None  # first poll after that which found it not served
    back_at: float | None = None  # first poll after gone_at that found it served again
    last_sent_ms: dict[str, int] = field(default_factory=dict)  # per broker address
    timeout_ms: dict[str, int] = field(default_factory=dict)  # per broker address


class LookupWatch:
    """Follows the cut-off groups' events as the bench sends them, and their routes in a
    lookup service it runs."""

    def __init__(
        self, names: set[str], start_ms: int, end_ms: int, started: float, wall_start_ms: int
    ) -> None:
        self.groups = {name: _GroupTimes() for name in names}
        self.start_ms, self.end_ms = start_ms, end_ms
        self.started, self.wall_start_ms = started, wall_start_ms
        self.process: subprocess.Popen[bytes] | None = None
        self.http_port = 0
        self._stop = threading.Event()
        self.longest_sweep_s = 0.0
        self.warehouse: Path | None = None
        self._monotonic_minus_wall = time.monotonic() - time.time()
        # to the poller: (state, group, bench-clock time from which a group in that state is
        # polled); made here, so what comes before the poller starts waits in it
        self._context = multiprocessing.get_context("spawn")  # never fork a JVM's process
        self._dues: Any = self._context.Queue()

    def _at(self, event_ms: int) -> float:
        """The bench clock's reading when the event of time `event_ms` was due."""
        return self.started + (event_ms - self.wall_start_ms) / 1000

    def sent(self, event: dict) -> None:
        """Called for every event the bench sends."""
        group = self.groups.get(event.get("brokerName", ""))
        if group is None:
            return
        addr, at = str(event.get("brokerAddr")), int(event["eventTime"])
        if event.get("eventType") == "REGISTER":
            group.timeout_ms[addr] = int(event.get("heartbeatTimeoutMillis") or DEFAULT_TIMEOUT_MS)
            if at >= self.end_ms and brings_routes_back(event) and group.returned_due is None:
                group.returned_due, group.returned_ms = self._at(at), at
        if at < self.start_ms:
            group.last_sent_ms[addr] = at

    def return_acked(self, name: str, at: float) -> None:
        """Kafka acknowledged the group's first REGISTER after the partition that brings its
        topics back at `at` (the bench's monotonic clock)."""
        group = self.groups.get(name)
        if group is not None and group.returned is None:
            group.returned = at
            # from now on the group can be served again: its poll starts
            self._dues.put(("gone", name, at))

    def _deadlines(self) -> None:
        for group in self.groups.values():
            ends = [
                at + group.timeout_ms.get(addr, DEFAULT_TIMEOUT_MS)
                for addr, at in group.last_sent_ms.items()
            ]
            if ends and max(ends) < self.end_ms:
                group.deadline, group.deadline_ms = self._at(max(ends)), max(ends)

    def start(self, warehouse: Path, live_table: Path) -> None:
        """In the background: once the job has published, run the lookup and poll."""
        self.warehouse = warehouse
        threading.Thread(target=self._run, args=(warehouse, live_table), daemon=True).start()

    def _run(self, warehouse: Path, live_table: Path) -> None:
        while not (live_table / "_delta_log").is_dir() and not self._stop.is_set():
            time.sleep(0.5)
        self.http_port = free_port()
        self.process = subprocess.Popen(
            serve_argv(warehouse, free_port(), self.http_port, 1),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        reports, stop = self._context.Queue(), self._context.Event()
        partition_start = self._at(self.start_ms)
        poller = self._context.Process(
            target=_poll,
            args=(self.http_port, list(self.groups), reports, stop, partition_start, self._dues),
            daemon=True,
        )
        poller.start()
        deadlines_sent = False
        while not self._stop.is_set():
            if not deadlines_sent and time.monotonic() >= partition_start + 5:
                # every event before the partition was sent (and reported) by now: the
                # deadlines are known (one already past is polled at once)
                deadlines_sent = True
                self._deadlines()
                for name, group in self.groups.items():
                    if group.deadline is not None:
                        self._dues.put(("seen", name, group.deadline - GONE_LEAD_S))
            try:
                name, what, at = reports.get(timeout=0.5)
            except queue.Empty:
                continue
            if what == "sweep":
                self.longest_sweep_s = max(self.longest_sweep_s, at)
            else:
                setattr(self.groups[name], f"{what}_at", at)
        stop.set()
        poller.join(10)

    def stop(self) -> None:
        self._stop.set()
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def report(self) -> str:
        """How late after each group's expiry deadline the lookup stopped serving it, and
        after its return started again: the worst group, and how many were measured."""
        self._deadlines()
        # a group the lookup never served before the partition (not registered yet, or
        # the lookup not ready yet) says nothing about how soon it stops serving it
        expiring = [
            g
            for g in self.groups.values()
            if g.deadline is not None and g.seen_at is not None and g.seen_at < g.deadline
        ]
        gone = [g.gone_at - g.deadline for g in expiring if g.gone_at is not None]  # type: ignore[operator]
        back = [
            g.back_at - g.returned
            for g in expiring
            if g.back_at is not None and g.returned is not None
        ]
        # how late the fleet acknowledged the returns against its clock: its own lag then
        fleet_late = [
            g.returned - g.returned_due
            for g in expiring
            if g.returned is not None and g.returned_due is not None
        ]
        not_gone = len(expiring) - len(gone)
        # where the job published each expiry and return: the delays' split
        commits = self._commits()
        job_gone, lookup_gone, job_back, lookup_back = [], [], [], []
        for g in expiring:
            if g.gone_at is not None and g.deadline is not None and g.deadline_ms is not None:
                published = published_at(commits, g.deadline_ms + 1)  # expired once W > deadline
                if published is not None:
                    job_gone.append(published - g.deadline)
                    lookup_gone.append(g.gone_at - published)
            if g.back_at is not None and g.returned is not None and g.returned_ms is not None:
                published = published_at(commits, g.returned_ms)
                if published is not None:
                    job_back.append(published - g.returned)
                    lookup_back.append(g.back_at - published)
        return (
            f"lookup: {len(expiring)} of {len(self.groups)} cut-off groups past their expiry "
            f"deadline; stopped serving them at most {max(gone, default=float('nan')):.1f} s "
            f"after the deadline (median {_median(gone):.1f} s"
            f"{f', {not_gone} never' if not_gone else ''}; the job published the expiry "
            f"{_spread(job_gone)} after it, the lookup stopped {_spread(lookup_gone)} after "
            f"that); served them again at most {max(back, default=float('nan')):.1f} s after "
            f"Kafka acknowledged their return (median {_median(back):.1f} s, {len(back)} of "
            f"{len(expiring)} seen back; the job published the return {_spread(job_back)} "
            f"after the acknowledgement, the lookup served it {_spread(lookup_back)} after "
            f"that); the returns acknowledged at most "
            f"{max(fleet_late, default=float('nan')):.1f} s after their due time on the fleet's "
            f"clock; longest poll sweep {self.longest_sweep_s:.2f} s"
        )

    def _commits(self) -> list[tuple[int, float]]:
        """route_progress's (watermark, commit time on the bench's monotonic clock) rows."""
        from deltalake import DeltaTable

        if self.warehouse is None:
            return []
        try:
            rows = (
                DeltaTable(str(self.warehouse / "route_progress"))
                .to_pyarrow_table(columns=["watermark", "committed_at_ms"])
                .to_pylist()
            )
        except Exception:  # no batch published
            return []
        return [
            (r["watermark"], r["committed_at_ms"] / 1000 + self._monotonic_minus_wall) for r in rows
        ]


def _poll(
    http_port: int,
    names: list[str],
    reports: Any,
    stop: Any,
    partition_start: float,
    dues: Any,
) -> None:
    """The watch's poll, in a process of its own: the bench's process (the Spark driver's
    Python, its live-table poller) holds the GIL most of the time, and polled from there a
    sweep of 30 groups took up to 0.94 s (60 x 1 000, load 11-16).

    Reports (group, "seen" / "gone" / "back", time.monotonic(), which every process of the
    machine shares) as each group is first served, then not, then served again. Polled only
    while that can happen, to leave the job its cores: a group not seen yet until the
    partition starts (`partition_start`, the bench's monotonic clock); a seen or gone one
    from the time `dues` gives for it ((state, group, from) tuples: a second before its
    expiry deadline, its return's acknowledgement); a group back is done. Also
    ("", "sweep", seconds) after each complete sweep."""
    state = dict.fromkeys(names, "unseen")
    polled_from: dict[tuple[str, str], float] = {}  # (state, group) -> from
    follows = {("unseen", True): "seen", ("seen", False): "gone", ("gone", True): "back"}
    connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
    while not stop.is_set():
        while True:
            try:
                now_is, name, at = dues.get_nowait()
            except queue.Empty:
                break
            polled_from[(now_is, name)] = at
        sweep_started = time.monotonic()
        due = [
            name
            for name, now_is in state.items()
            if (now_is == "unseen" and sweep_started < partition_start)
            or polled_from.get((now_is, name), float("inf")) <= sweep_started
        ]
        for name in due:
            served = _served(connection, name)
            if served is None:
                connection.close()
                break
            became = follows.get((state[name], served))
            if became is not None:
                state[name] = became
                reports.put((name, became, time.monotonic()))
        else:
            if due:
                reports.put(("", "sweep", time.monotonic() - sweep_started))
        time.sleep(POLL_PAUSE_S)


def _served(connection: http.client.HTTPConnection, topic: str) -> bool | None:
    """Whether the lookup serves the topic's route; None when it cannot say yet."""
    try:
        connection.request("GET", f"/topics/{topic}/route")
        response = connection.getresponse()
        response.read()
    except OSError:
        time.sleep(0.5)
        return None
    if response.status in (200, 404):
        return response.status == 200
    return None


def published_at(commits: list[tuple[int, float]], event_ms: int) -> float | None:
    """When the job first published a watermark at or past `event_ms` (State(W) holds what
    happened by then), from (watermark, commit time) rows; None if it never did."""
    return min((at for watermark, at in commits if watermark >= event_ms), default=None)


def _spread(values: list[float]) -> str:
    if not values:
        return "(not measured)"
    return f"median {_median(values):.1f} s / max {max(values):.1f} s"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")
