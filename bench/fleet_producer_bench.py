"""The live benches' fleet producer alone: CPU seconds per 60 s of the fleet's event time.

The fleet of `bench.stream_bench realtime` (bench/fleet_process.py) must keep up with its own
clock on the machine the job runs on. This produces the same fleet (same seed, sizes and
faults) to the local Kafka as fast as it can, with the fleet's producer settings or others,
and reports the CPU the process spent per 60 s of event time: all threads (kafka-python's
sender thread compresses and checksums the record batches), and the main thread alone
(generating, encoding, handing records to send()). The cold start (every broker's first
registration) is left out: the window measured starts at --warm-up-s of event time.

    .venv/bin/python -m bench.fleet_producer_bench --brokers 300 --topics 10000 --seconds 60 \
        [--compression gzip|lz4|zstd|none] [--crc python]

--crc python forces kafka-python's pure-Python CRC32C (what it uses without the `crc32c`
package), for a before/after in one environment.
"""

from __future__ import annotations

import argparse
import resource
import time
import uuid

from bench.backfill_bench import HEARTBEATS_PER_PERIOD, PERIOD_MS, SEED
from bench.fleet_process import FLEET_COMPRESSION, fleet_producer


def _process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _force_python_crc() -> None:
    """kafka-python checksums batches with calc_crc32c, bound to the `crc32c` package's
    function when that is installed: rebind it to the pure-Python one."""
    from kafka.record import default_records
    from kafka.record._crc32c import crc

    default_records.calc_crc32c = lambda view: crc(view)


def run(args: argparse.Namespace) -> str:
    from routelake_dev import kafka_local
    from routelake_dev.simulator import EventEncoder, FleetSimulator

    if args.crc == "python":
        _force_python_crc()
    topic = f"fleet-cpu-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(args.bootstrap, topic)
    compression = None if args.compression == "none" else args.compression
    producer = fleet_producer(args.bootstrap, compression)
    start_ms = int(time.time() * 1000) - int((args.warm_up_s + args.seconds) * 1000)
    fleet = FleetSimulator(
        SEED,
        args.brokers,
        args.topics,
        PERIOD_MS,
        start_ms,
        heartbeats_per_period=HEARTBEATS_PER_PERIOD,
        fault_interval_ms=args.fault_interval_ms,
    )
    encode = EventEncoder()
    window_ms = start_ms + int(args.warm_up_s * 1000)
    end_ms = window_ms + int(args.seconds * 1000)
    marks: tuple[float, float, float] | None = None
    events = registrations = size = 0
    for event in fleet.events():
        if event["eventTime"] >= end_ms:
            break
        if marks is None and event["eventTime"] >= window_ms:
            producer.flush()  # the warm-up's batches are compressed and sent before the window
            marks = (_process_cpu_s(), time.thread_time(), time.monotonic())
        value = encode(event)
        producer.send(topic, key=event["brokerName"].encode(), value=value)
        if marks is not None:
            events += 1
            registrations += event["eventType"] == "REGISTER"
            size += len(value)
    producer.flush()
    assert marks is not None, "the fleet sent nothing in the window"
    process_s = _process_cpu_s() - marks[0]
    main_s = time.thread_time() - marks[1]
    wall_s = time.monotonic() - marks[2]
    producer.close()
    per_60 = 60 / args.seconds
    return (
        f"fleet producer {args.brokers} x {args.topics}, compression {args.compression}, "
        f"CRC32C {args.crc}: {events} events ({registrations} registrations, "
        f"{size / 1e6:,.0f} MB of JSON) in {args.seconds:.0f} s of event time; "
        f"CPU per 60 s of fleet {process_s * per_60:.1f} s (main thread: generate, encode, "
        f"send() {main_s * per_60:.1f} s; sender thread: compress, checksum, write "
        f"{(process_s - main_s) * per_60:.1f} s); wall {wall_s * per_60:.1f} s per 60 s"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:19092")
    p.add_argument("--brokers", type=int, default=300)
    p.add_argument("--topics", type=int, default=10000)
    p.add_argument("--seconds", type=float, default=60, help="event time measured")
    p.add_argument("--warm-up-s", type=float, default=35, help="event time before the window")
    p.add_argument("--fault-interval-ms", type=int, default=1_800_000)
    p.add_argument("--compression", default=FLEET_COMPRESSION or "none")
    p.add_argument("--crc", choices=("native", "python"), default="native")
    print(run(p.parse_args()), flush=True)


if __name__ == "__main__":
    main()
