"""Streaming job benchmarks on this machine, against the real local Kafka broker.

    .venv/bin/python -m bench.stream_bench throughput --events 300000 --topics 100
    .venv/bin/python -m bench.stream_bench freshness --changes 120
    .venv/bin/python -m bench.stream_bench realtime --brokers 100 --topics 10000 --duration 300

All feed the job with the fleet simulator (routelake_dev.simulator).

throughput: a backlog of a simulated fleet (REGISTER with T topics every 30 s per broker,
  HEARTBEATs every 5 s between) is produced to a fresh topic, then `routectl run
  --available-now` drains it; events/s = events / drain time. This is the rate the job can
  sustain.
freshness: the job runs live (trigger 1 s); the simulated fleet, in a process of its own
  (bench/fleet_process.py), sends its events when the wall clock reaches their eventTime, with
  a fault per broker group every --fault-interval-ms on average (a topic change re-registers
  with a bumped dataVersion). After a 20 s warm-up, every registration with a dataVersion not
  seen before for that broker is timed from Kafka's acknowledgement (the record is in the log,
  readable by the job) to that dataVersion being in broker_live_table (read with delta-rs
  every 0.1 s); p50/p95 over --changes changes. Also printed: the fleet's delivery (send() ->
  Kafka's acknowledgement) and the figure of before, from send() (3fa987a and earlier: the
  fleet then produced from the job's own process, and at 300 x 10 000 its records reached
  Kafka 15-38 s after send(); docs/benchmarks.md "Freshness at 300 x 10 000").
  --trace FILE: JSON lines for bench.freshness_trace (where each change's time went).
realtime: the RIP-29 run: the same live run for --duration seconds of event time, by default
  300 broker groups x 10 000 topics; also prints the arrival rate, the job's processing rate
  (input rows of its published batches), how far the published watermark was behind at the
  end of the run and how long it took to catch up. Lag bounded = it held that fleet.
  With --partition-at S: a network partition. --partition-fraction of the broker groups
  (the first by name) send nothing from S s of event time for --partition-s seconds (150 by
  default: past the 120 s expiry, so their routes vanish), then go on as before (each returns
  with its next REGISTER, within one 30 s period, as RocketMQ brokers do). Also printed: the
  longest batch, and how long after the partition ended every group was live again in the
  published broker_live_table; and, from a `routectl serve` the bench runs on the warehouse,
  how long after each cut-off group's expiry deadline the lookup stopped serving it and how
  long after its return (its master's REGISTER, acknowledged by Kafka) it served it again,
  each split into the job's part (until route_progress published it) and the lookup's
  (bench/partition_lookup.py). The fleet must keep its clock for these to measure the job:
  "producer N s behind" and "returns acknowledged N s after their due time" say whether it did
  (bench.fleet_producer_bench measures the producer alone).

    .venv/bin/python -m bench.stream_bench realtime --duration 420 --fault-interval-ms 1800000 \
        --partition-at 180 --partition-fraction 0.5 --partition-s 150
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

from bench.backfill_bench import fleet_lines
from bench.fleet_process import Change, FleetProcess, FleetSpec, partition_cut
from bench.freshness_trace import TraceWriter
from bench.partition_lookup import LookupWatch


def _job_config(config, topic: str, work: Path, **kafka):
    return config.with_overrides("kafka", topic=topic, **kafka).with_overrides(
        "paths", warehouse=str(work / "warehouse"), checkpoint=str(work / "checkpoint")
    )


def _produce(bootstrap: str, topic: str, lines: list[bytes]) -> float:
    from routelake_dev.simulator import make_producer

    producer = make_producer(bootstrap, acks=1, linger_ms=50)
    started = time.monotonic()
    for line in lines:
        producer.send(topic, value=line)
    producer.flush()
    producer.close()
    return time.monotonic() - started


def throughput(args, config) -> None:
    from routelake_dev import kafka_local
    from routing_lib.jobs.route_state import run_route_state

    kafka_local.start(config.kafka)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(config.kafka.bootstrap_servers, topic)
    lines = list(fleet_lines(args.events, args.brokers, args.topics))
    seconds = _produce(config.kafka.bootstrap_servers, topic, lines)
    size = sum(map(len, lines))
    print(
        f"backlog: {len(lines)} events ({size / 1e6:.0f} MB, {args.brokers} brokers x "
        f"{args.topics} topics) produced in {seconds:.1f} s"
    )
    work = Path(args.workdir) / topic
    job = _job_config(config, topic, work, max_offsets_per_trigger=args.max_offsets)
    started = time.monotonic()
    metrics = run_route_state(job, available_now=True, install_signal_handlers=False)
    drained = time.monotonic() - started
    print(
        f"drain: {drained:.1f} s -> {len(lines) / drained:,.0f} events/s "
        f"({metrics.get('routelake_job_batches_total'):.0f} batches of <= {args.max_offsets}, "
        f"history {'on' if config.routes.history else 'off'})"
    )


def _row_key(row: dict) -> tuple:
    version = row["data_version"]
    return (row["broker_addr"], version["state_version"], version["timestamp"], version["counter"])


class _BatchLog(logging.Handler):
    """Collects the job's per-batch log line: duration and phases of every published batch."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds: list[float] = []
        self.published_at: list[float] = []  # wall clock s when each batch was published
        self.phases: dict[str, list[float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if not record.msg.startswith("batch %d published"):
            return
        args = record.args if isinstance(record.args, tuple) else ()
        self.seconds.append(float(args[2]))  # type: ignore[arg-type]  # "%.2fs": a float
        self.published_at.append(time.time())
        for name, value in re.findall(r"(\w+) ([\d.]+)s", str(args[3])):
            self.phases.setdefault(name, []).append(float(value))

    def summary(self) -> str:
        if not self.seconds:
            return "batches: none published"
        parts = [f"{k} {statistics.median(v):.2f} s" for k, v in self.phases.items()]
        return (
            f"batches: {len(self.seconds)}, median {statistics.median(self.seconds):.2f} s "
            f"(median phases: {', '.join(parts)}), longest {max(self.seconds):.2f} s"
        )


def freshness(args, config) -> None:
    from routelake_dev import kafka_local
    from routing_lib.jobs.route_state import run_route_state

    kafka_local.start(config.kafka)
    topic = f"fresh-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(config.kafka.bootstrap_servers, topic)
    work = Path(args.workdir) / topic
    job = _job_config(config, topic, work, trigger_interval="1 second", starting_offsets="earliest")
    stop = threading.Event()
    job_thread = threading.Thread(
        target=run_route_state,
        args=(job,),
        kwargs={"stop_event": stop, "install_signal_handlers": False},
        daemon=True,
    )
    batches = _BatchLog()
    logging.getLogger("routelake.route_state").addHandler(batches)
    logging.getLogger("routelake.route_state").setLevel(logging.INFO)
    trace = TraceWriter(args.trace, work) if args.trace else None
    job_thread.start()
    memory = _PeakMemory()
    partition = None
    if getattr(args, "partition_at", None) is not None:
        partition = (args.partition_at, args.partition_fraction, args.partition_s)
    fleet = FleetProcess(
        FleetSpec(
            config.kafka.bootstrap_servers,
            topic,
            args.brokers,
            args.topics,
            args.fault_interval_ms,
            args.split_registration,
            args.duration,
            args.timeout,
            args.changes,
            partition,
        )
    ).start()
    live_path = str(work / "warehouse" / "broker_live_table")
    seen = _LivePoller(live_path, fleet, args.changes, trace).start()
    watch = _Partition.of(args, fleet) if partition else None
    lookup = None
    if watch is not None:
        watch.watch(live_path)
        # LookupWatch keeps the bench's monotonic clock: the fleet's start on it
        started_monotonic = time.monotonic() - (time.time() - fleet.started)
        lookup = LookupWatch(
            watch.names, watch.start_ms, watch.end_ms, started_monotonic, fleet.wall_start_ms
        )
        lookup.start(work / "warehouse", Path(live_path))
        # the cut-off groups' events as they are sent, and their returns as Kafka acknowledged
        # them (the fleet's wall clock, on the bench's monotonic one)
        fleet.on_cut_off_event(
            lookup.sent,
            lambda name, acked: lookup.return_acked(
                name, started_monotonic + acked - fleet.started
            ),
        )
    try:
        report = fleet.wait()
    except BaseException:  # a SIGTERM or an error: the lookup's server is a process of its own
        if lookup is not None:
            lookup.stop()
        raise
    behind_s = max(
        0.0, report.ended - fleet.started - (report.last_event_time - fleet.wall_start_ms) / 1000
    )
    if args.what == "realtime":
        seconds = report.ended - fleet.started
        _report_lag(work, config, report.sent, seconds, report.last_event_time, behind_s)
        if watch is not None:
            print(watch.report(batches, report.silenced))
        if lookup is not None:
            print(lookup.report(), flush=True)
            lookup.stop()
        print(_costs(work, report.faults, memory.peak_bytes))
    stop.set()
    job_thread.join(120)
    seen.stop.set()
    if trace is not None:
        trace.changes(fleet, seen.seen_at, seen.seen_version)
    print(batches.summary())
    print(
        f"{report.sent / (report.ended - fleet.started):.0f} events/s; watermarkDelay "
        f"{config.routes.watermark_delay_ms / 1000:.0f} s, trigger 1 s, history "
        f"{'on' if config.routes.history else 'off'}"
    )
    print(freshness_summary(fleet.changes, fleet.started, seen.seen_at))


def freshness_summary(
    changes: dict[tuple, Change], started: float, seen_at: dict[tuple, float]
) -> str:
    """The freshness of the measured changes seen in broker_live_table (`seen_at`, wall clock
    s): from Kafka's acknowledgement of the change (the record is in the log, readable by the
    job); the fleet's delivery (send -> acknowledged); and, as the figure of before (3fa987a
    and earlier), from the bench's send. Over all of them, then over those sent after the
    first minute of the run (`started`: wall clock s), issue 36's goal as worded."""
    lines = []
    for label, after_s in (("", 0.0), (" produced after the first minute", 60.0)):
        measured = [k for k, c in changes.items() if c.sent - started >= after_s]
        keys = [k for k in measured if k in seen_at]
        if not keys:
            continue
        acked = [(changes[k], seen_at[k]) for k in keys if changes[k].acked is not None]
        from_ack = [seen - c.acked for c, seen in acked if c.acked is not None]
        delivery = [c.acked - c.sent for c, _ in acked if c.acked is not None]
        from_send = [seen_at[k] - changes[k].sent for k in keys]
        lines.append(
            f"freshness of the {len(keys)} of {len(measured)} changes{label}: from Kafka's "
            f"acknowledgement to broker_live_table {_percentiles(from_ack)}; delivery (send -> "
            f"acknowledged) {_percentiles(delivery)}; from the bench's send (the figure of "
            f"before) {_percentiles(from_send)}"
        )
    return "\n".join(lines) or "freshness: no change became visible"


def _percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {statistics.median(ordered):.1f} s, p95 {p95:.1f} s, max {ordered[-1]:.1f} s"


class _LivePoller:
    """Reads broker_live_table every 0.1 s (delta-rs, as any reader would): the wall clock
    time each measured change's dataVersion is first seen there."""

    def __init__(self, live_path: str, fleet: FleetProcess, changes: int, trace) -> None:
        self.live_path, self.fleet, self.changes, self.trace = live_path, fleet, changes, trace
        self.seen_at: dict[tuple, float] = {}
        self.seen_version: dict[tuple, int] = {}  # the table version it was first seen in
        self.stop = threading.Event()

    def start(self) -> _LivePoller:
        threading.Thread(target=self._poll, daemon=True, name="live-poller").start()
        return self

    def _poll(self) -> None:
        from deltalake import DeltaTable

        while not self.stop.is_set():
            started, version = time.time(), -1
            try:
                table = DeltaTable(self.live_path)
                version = table.version()
                rows = table.to_pyarrow_table(columns=["broker_addr", "data_version"]).to_pylist()
            except Exception:  # the table is not created yet
                rows = []
            now = time.time()
            for key in map(_row_key, rows):
                if key in self.fleet.changes and key not in self.seen_at:
                    self.seen_at[key] = now
                    self.seen_version[key] = version
            if len(self.seen_at) >= self.changes:
                self.fleet.stop()  # enough changes measured (the freshness mode)
            if self.trace is not None:
                self.trace.write("poll", version=version, seconds=round(now - started, 4))
            time.sleep(0.1)


class _Partition:
    """The broker groups cut off by a network partition, and when (the fleet process keeps
    their events from Kafka); watches when they are all live again."""

    def __init__(self, names: set[str], start_ms: int, end_ms: int, total: int) -> None:
        self.names, self.start_ms, self.end_ms, self.total = names, start_ms, end_ms, total

    @classmethod
    def of(cls, args, fleet: FleetProcess) -> _Partition:
        start = fleet.wall_start_ms + int(args.partition_at * 1000)
        cut = partition_cut(fleet.names, args.partition_fraction)
        return cls(cut, start, start + int(args.partition_s * 1000), len(set(fleet.names)))

    def watch(self, live_path: str) -> None:
        """In the background: the first time after the partition that every group it cut off is
        live again in the published broker_live_table. The fleet's eventTime is its wall clock,
        so the partition ends at end_ms on the wall clock."""
        self.ended_at = self.end_ms / 1000
        self.back_s: float | None = None

        def poll() -> None:
            from deltalake import DeltaTable

            time.sleep(max(0.0, self.ended_at - time.time()))
            while self.back_s is None and time.time() < self.ended_at + 600:
                table = DeltaTable(live_path).to_pyarrow_table(columns=["broker_name"])
                if self.names <= set(table.column(0).to_pylist()):
                    self.back_s = time.time() - self.ended_at
                time.sleep(0.5)

        threading.Thread(target=poll, daemon=True).start()

    def report(self, batches: _BatchLog, silenced: int) -> str:
        after = [
            s
            for s, at in zip(batches.seconds, batches.published_at, strict=True)
            if at >= self.ended_at
        ]
        back = (
            f"every group it cut off live again {self.back_s:.1f} s after it ended"
            if self.back_s is not None
            else "not every group it cut off live again yet"
        )
        longest = f"; longest batch after it {max(after):.1f} s" if after else ""
        return (
            f"partition: {len(self.names)} of {self.total} groups silent for "
            f"{(self.end_ms - self.start_ms) / 1000:.0f} s ({silenced} events not sent); "
            f"{back}{longest}"
        )


class _PeakMemory:
    """The largest resident memory of this process and its descendants (the Spark JVM, its
    Python workers), sampled every second from /proc."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        import os

        page = os.sysconf("SC_PAGE_SIZE")
        while True:
            parents: dict[int, int] = {}
            resident: dict[int, int] = {}
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    stat = (entry / "stat").read_text()
                    pages = int((entry / "statm").read_text().split()[1])
                except OSError:
                    continue
                pid = int(entry.name)
                parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
                resident[pid] = pages * page

            total = sum(size for pid, size in resident.items() if _descends(pid, parents))
            self.peak_bytes = max(self.peak_bytes, total)
            time.sleep(1)


def _descends(pid: int, parents: dict[int, int]) -> bool:
    """`pid` is this process or one of its descendants."""
    import os

    while pid > 1:
        if pid == os.getpid():
            return True
        pid = parents.get(pid, 0)
    return False


def _costs(work: Path, faults: int, peak_bytes: int) -> str:
    """Stored route-history rows per injected fault (the group layout's change tables, from
    which topic_route_history is derived), the content store's size, the peak memory."""
    from deltalake import DeltaTable

    history_rows = 0
    for table in ("topic_base_changes", "topic_overlay_changes"):
        try:
            actions = DeltaTable(str(work / "warehouse" / table)).get_add_actions()
            history_rows += sum(actions.column("num_records").to_pylist())
        except Exception:  # history off, or not created
            pass
    content = work / "checkpoint" / "content"
    content_bytes = sum(f.stat().st_size for f in content.rglob("*") if f.is_file())
    per_fault = f"{history_rows / faults:,.0f}" if faults else "n/a"
    return (
        f"costs: {faults} faults injected, route history stored as {history_rows:,} change "
        f"rows ({per_fault} per fault, the first registrations included); content store "
        f"{content_bytes / 2**20:,.1f} MiB; peak memory (this process, the JVM, the workers) "
        f"{peak_bytes / 2**30:.2f} GiB"
    )


def _published(work: Path) -> tuple[int, int]:
    """(watermark, input rows) of the job's published batches so far."""
    from deltalake import DeltaTable

    try:
        rows = (
            DeltaTable(str(work / "warehouse" / "route_progress"))
            .to_pyarrow_table(columns=["watermark", "input_rows"])
            .to_pylist()
        )
    except Exception:  # not created yet
        return 0, 0
    return max((r["watermark"] for r in rows), default=0), sum(r["input_rows"] for r in rows)


def _report_lag(
    work: Path, config, sent: int, seconds: float, last_ms: int, behind_s: float
) -> None:
    """Arrival vs processing rate over the run, and the published watermark's lag at its end."""
    delay = config.routes.watermark_delay_ms
    watermark, processed = _published(work)
    print(
        f"arrival {sent / seconds:,.0f} events/s (producer {behind_s:.1f} s behind the fleet's "
        f"clock at the end), processed {processed / seconds:,.0f} events/s: ratio "
        f"{processed / max(sent, 1):.2f}"
    )
    lag_s = (last_ms - delay - watermark) / 1000 if watermark else float("inf")  # none yet
    caught_up = time.monotonic()
    while watermark < last_ms - delay - 5_000 and time.monotonic() - caught_up < 600:
        time.sleep(1)  # the fleet stopped: wait for the job to publish what it received
        watermark, _ = _published(work)
    print(
        f"end lag: published watermark {lag_s:.1f} s behind (last eventTime - delay) when the "
        f"run ended; within 5 s of it {time.monotonic() - caught_up:.0f} s later"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("throughput")
    p.add_argument("--events", type=int, default=300_000)
    p.add_argument("--brokers", type=int, default=100)
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--max-offsets", type=int, default=100_000)
    p = sub.add_parser("freshness")
    p.add_argument("--changes", type=int, default=120)
    p.add_argument(
        "--fault-interval-ms",
        type=int,
        default=20_000,
        help="mean time between faults per broker group (topic changes are 6 in 20)",
    )
    p.add_argument("--brokers", type=int, default=50)
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--duration", type=float, default=0, help="stop after this much event time")
    p = sub.add_parser("realtime")
    p.add_argument("--brokers", type=int, default=300)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--duration", type=float, default=300)
    p.add_argument("--fault-interval-ms", type=int, default=20_000)
    p.add_argument("--changes", type=int, default=10**9)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--partition-at", type=float, default=None, help="event-time seconds")
    p.add_argument("--partition-fraction", type=float, default=0.5)
    p.add_argument("--partition-s", type=float, default=150)
    for p in sub.choices.values():
        p.add_argument("--workdir", default=".work/bench-stream")
        p.add_argument("--no-history", action="store_true")
        p.add_argument("--trace", default=None, help="JSON lines of where the time goes")
        p.add_argument(
            "--split-registration",
            type=int,
            default=None,
            help="brokers register in chunks of this many topics (enableSplitRegistration)",
        )
    args = parser.parse_args()
    # A SIGTERM ends the bench as an exception would: its finally blocks stop the job, the
    # lookup and the watch, and multiprocessing's exit hook ends the fleet's process (the
    # default action killed this process alone and left the fleet sending).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    from routing_lib.config import load_config

    config = load_config()
    if args.no_history:
        config = config.with_overrides("routes", history=False)
    (throughput if args.what == "throughput" else freshness)(args, config)  # realtime: live


if __name__ == "__main__":
    main()
