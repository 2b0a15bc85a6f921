"""Streaming job benchmarks on this machine, against the real local Kafka broker.

    .venv/bin/python bench/stream_bench.py throughput --events 300000 --topics 100
    .venv/bin/python bench/stream_bench.py freshness --changes 120 --rate 200

throughput: a backlog of a steady fleet (REGISTER with T topics every 30 s per broker,
  HEARTBEATs every 5 s between) is produced to a fresh topic, then `routectl run
  --available-now` drains it; events/s = events / drain time. This is the rate the job can
  sustain; a live run at a given rate is `--live-rate R --live-seconds S` (reports Kafka lag
  per batch).
freshness: the job runs live (trigger 1 s); a background fleet sends events at --rate
  events/s with eventTime = now; every ~0.5 s one broker re-registers with a bumped
  dataVersion. The time from producing that registration to its dataVersion being in
  broker_live_table (read with delta-rs) is measured; p50/p95 over --changes changes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backfill_bench import HEARTBEAT_EVERY_MS, REGISTER_EVERY_MS, topic_table  # noqa: E402


def fleet_lines(events: int, brokers: int, topics: int, start_ms: int) -> list[bytes]:
    tables = {b: json.dumps(topic_table(b, topics, 1)) for b in range(brokers)}
    out, steps = [], REGISTER_EVERY_MS // HEARTBEAT_EVERY_MS
    cycle = 0
    while len(out) < events:
        for step in range(steps):
            for b in range(brokers):
                now = start_ms + cycle * REGISTER_EVERY_MS + step * HEARTBEAT_EVERY_MS + b
                out.append(_event(b, now, topics, step == 0, tables[b]))
        cycle += 1
    return out[:events]


def _event(b: int, now: int, topics: int, register: bool, table: str, counter: int = 1) -> bytes:
    base = {
        "eventType": "REGISTER" if register else "HEARTBEAT",
        "eventTime": now,
        "clusterName": "bench",
        "brokerAddr": f"10.9.{b // 250}.{b % 250}:10911",
        "brokerName": f"bench-{b:04d}",
        "brokerId": 0,
    }
    if not register:
        return json.dumps(base).encode()
    base |= {
        "haServerAddr": None,
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": counter},
    }
    return (json.dumps(base)[:-1] + ', "topicConfigTable": ' + table + "}").encode()


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
    from routing_lib.stream_job import run_stream

    kafka_local.start(config.kafka)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(config.kafka.bootstrap_servers, topic)
    lines = fleet_lines(args.events, args.brokers, args.topics, 1_764_000_000_000)
    seconds = _produce(config.kafka.bootstrap_servers, topic, lines)
    size = sum(map(len, lines))
    print(
        f"backlog: {len(lines)} events ({size / 1e6:.0f} MB, {args.brokers} brokers x "
        f"{args.topics} topics) produced in {seconds:.1f} s"
    )
    work = Path(args.workdir) / topic
    job = _job_config(config, topic, work, max_offsets_per_trigger=args.max_offsets)
    started = time.monotonic()
    metrics = run_stream(job, available_now=True, install_signal_handlers=False)
    drained = time.monotonic() - started
    print(
        f"drain: {drained:.1f} s -> {len(lines) / drained:,.0f} events/s "
        f"({metrics.get('routelake_batches_total'):.0f} batches of <= {args.max_offsets}, "
        f"history {'on' if config.routes.history else 'off'})"
    )


def freshness(args, config) -> None:
    from deltalake import DeltaTable

    from routelake_dev import kafka_local
    from routelake_dev.simulator import make_producer
    from routing_lib.stream_job import run_stream

    kafka_local.start(config.kafka)
    topic = f"fresh-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(config.kafka.bootstrap_servers, topic)
    work = Path(args.workdir) / topic
    job = _job_config(config, topic, work, trigger_interval="1 second", starting_offsets="earliest")
    stop = threading.Event()
    job_thread = threading.Thread(
        target=run_stream,
        args=(job,),
        kwargs={"stop_event": stop, "install_signal_handlers": False},
        daemon=True,
    )
    job_thread.start()
    producer = make_producer(config.kafka.bootstrap_servers, acks=1, linger_ms=5)
    brokers, tables = args.brokers, {}
    counters = dict.fromkeys(range(args.brokers), 1)
    sent_at: dict[tuple[int, int], float] = {}
    seen_at: dict[tuple[int, int], float] = {}
    live_path = str(work / "warehouse" / "broker_live_table")

    def poll() -> None:
        while not stop.is_set():
            try:
                rows = (
                    DeltaTable(live_path)
                    .to_pyarrow_table(columns=["broker_name", "data_version"])
                    .to_pylist()
                )
            except Exception:  # noqa: BLE001 - not created yet
                rows = []
            now = time.monotonic()
            for row in rows:
                key = (int(row["broker_name"].split("-")[1]), row["data_version"]["counter"])
                if key in sent_at and key not in seen_at:
                    seen_at[key] = now
            time.sleep(0.1)

    threading.Thread(target=poll, daemon=True).start()
    for broker in range(brokers):  # everyone registers once, then heartbeats
        tables[broker] = json.dumps(topic_table(broker, args.topics, 1))
        producer.send(
            topic, value=_event(broker, int(time.time() * 1000), args.topics, True, tables[broker])
        )
    interval = 1.0 / args.rate
    next_change, b, changes = time.monotonic() + 20, 0, 0
    started = time.monotonic()
    while len(seen_at) < args.changes and time.monotonic() - started < args.timeout:
        now_ms = int(time.time() * 1000)
        b = (b + 1) % brokers
        if time.monotonic() >= next_change and changes < args.changes:
            counters[b] += 1
            line = _event(b, now_ms, args.topics, True, tables[b], counters[b])
            sent_at[(b, counters[b])] = time.monotonic()
            next_change += 0.5
            changes += 1
        else:
            line = _event(b, now_ms, args.topics, False, tables[b])
        producer.send(topic, value=line)
        time.sleep(interval)
    producer.close()
    stop.set()
    job_thread.join(120)
    delays = sorted(seen_at[k] - sent_at[k] for k in seen_at)
    if not delays:
        print("freshness: no change became visible")
        return
    p95 = delays[min(len(delays) - 1, int(0.95 * len(delays)))]
    print(
        f"freshness over {len(delays)} changes at {args.rate} events/s: "
        f"p50 {statistics.median(delays):.1f} s, p95 {p95:.1f} s, max {delays[-1]:.1f} s "
        f"(watermarkDelay {config.routes.watermark_delay_ms / 1000:.0f} s, trigger 1 s, "
        f"history {'on' if config.routes.history else 'off'})"
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
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--brokers", type=int, default=50)
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--timeout", type=float, default=600)
    for p in sub.choices.values():
        p.add_argument("--workdir", default=".work/bench-stream")
        p.add_argument("--no-history", action="store_true")
    args = parser.parse_args()

    from routing_lib.config import load_config

    config = load_config()
    if args.no_history:
        config = config.with_overrides("routes", history=False)
    (throughput if args.what == "throughput" else freshness)(args, config)


if __name__ == "__main__":
    main()
