"""Collector throughput: a fleet of brokers (default 300 x 1 000 topics) registers against a real
`routectl collect` process publishing to the local Kafka (acks=all, idempotent). Reports
registrations/s and ack latency percentiles (request sent -> answer read, which includes the
Kafka acknowledgement), and checks that every answer was SUCCESS and every registration is in
Kafka. Bounded: --rounds registrations per broker, stopped after --max-seconds.

    .venv/bin/python -m bench.collector_bench [--brokers 300 --topics 1000 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from routelake_dev import broker_requests, kafka_local
from routing_lib.config import load_config
from routing_lib.remoting.frames import FrameDecoder, encode
from tests.support.collector_support import start_collector, stop_collector


def fleet_frames(brokers: int, topics: int, round_no: int) -> list[bytes]:
    """One REGISTER_BROKER frame per broker: `topics` topics, a dataVersion per round."""
    frames = []
    for b in range(brokers):
        table = {f"Topic{t}": broker_requests.topic_config(f"Topic{t}", 8) for t in range(topics)}
        version = {"stateVersion": 0, "timestamp": 1_764_000_000_000 + b, "counter": round_no}
        frames.append(
            encode(
                broker_requests.register_request(
                    "BenchCluster",
                    f"broker-{b:03d}",
                    f"127.0.{b // 250}.{b % 250 + 1}:10911",
                    topics=table,
                    data_version=version,
                    opaque=round_no,
                )
            )
        )
    return frames


async def broker_loop(
    port: int, frames: list[bytes], latencies: list[float], codes: list[int], deadline: float
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    decoder = FrameDecoder()
    try:
        for frame in frames:
            if time.monotonic() > deadline:
                return
            started = time.perf_counter()
            writer.write(frame)
            await writer.drain()
            answers: list = []
            while not answers:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("collector closed the connection")
                answers = decoder.feed(data)
            latencies.append(time.perf_counter() - started)
            codes.append(answers[0].code)
    finally:
        writer.close()


async def drive(
    port: int, per_broker: list[list[bytes]], max_seconds: float
) -> tuple[list[float], list[int], float]:
    latencies: list[float] = []
    codes: list[int] = []
    started = time.monotonic()
    await asyncio.gather(
        *(
            broker_loop(port, frames, latencies, codes, started + max_seconds)
            for frames in per_broker
        )
    )
    return latencies, codes, time.monotonic() - started


def kafka_count(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends, starts = consumer.end_offsets(tps), consumer.beginning_offsets(tps)
        return sum(ends[tp] - starts[tp] for tp in tps)
    finally:
        consumer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--brokers", type=int, default=300)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="registrations per broker")
    parser.add_argument("--max-seconds", type=float, default=240.0)
    parser.add_argument("--kafka", default=load_config().kafka.bootstrap_servers)
    args = parser.parse_args(argv)

    topic = f"routelake-collector-bench-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(args.kafka, topic, partitions=1)
    rounds = [fleet_frames(args.brokers, args.topics, r + 1) for r in range(args.rounds)]
    per_broker = [[rounds[r][b] for r in range(args.rounds)] for b in range(args.brokers)]
    frame_bytes = statistics.mean(len(f) for f in rounds[0])
    with tempfile.TemporaryDirectory() as scratch:
        proc, port = start_collector(args.kafka, topic, Path(scratch) / "collect.log")
        try:
            latencies, codes, seconds = asyncio.run(drive(port, per_broker, args.max_seconds))
        finally:
            stop_collector(proc)
    published = kafka_count(args.kafka, topic)  # REGISTERs plus the TICKs
    result = {
        "brokers": args.brokers,
        "topics_per_broker": args.topics,
        "registrations": len(codes),
        "failed": sum(c != 0 for c in codes),
        "seconds": round(seconds, 2),
        "registrations_per_s": round(len(codes) / seconds, 1),
        "frame_kib": round(frame_bytes / 1024, 1),
        "ack_ms_p50": round(percentile(latencies, 0.5) * 1000, 1),
        "ack_ms_p99": round(percentile(latencies, 0.99) * 1000, 1),
        "ack_ms_max": round(max(latencies) * 1000, 1),
        "kafka_records": published,
    }
    print(json.dumps(result, indent=1))
    ok = result["failed"] == 0 and published >= len(codes)
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=args.kafka)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
