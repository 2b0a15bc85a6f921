"""A finished live run's freshness, rebuilt from what it left: its Kafka topic (each record's
timestamp is when the bench handed it to send()), the checkpoint's offset log (each batch's
start, watermark and end offset) and broker_live_table's Delta log (each batch's commit time).

    .venv/bin/python -m bench.freshness_replay .work/bench-stream/fresh-917288f4

For every REGISTER with a (brokerAddr, dataVersion) not sent before: send -> the commit of the
first batch whose watermark passes its eventTime (what the bench's freshness measured, to
within its 0.1 s poll), split at the start of the batch that read the record from Kafka. A
batch reads every record in the log when it starts, so "send -> read" over a batch's length
is time the record was not in Kafka yet: the producer's delivery, not the job.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

FIELD = re.compile(rb'"(eventType|eventTime|brokerAddr)":\s*("([^"]*)"|(-?\d+))')
VERSION = re.compile(rb'"dataVersion":\s*(\{[^}]*\})')


@dataclass(frozen=True)
class Batch:
    id: int
    start_ms: int  # batchTimestampMs
    watermark: int  # the job's: Spark's minus the 1 ms lead (docs/architecture.md)
    end_offset: int  # exclusive: the records it read end here
    commit_ms: int | None  # broker_live_table's commit of this batch


def _records(bootstrap: str, topic: str) -> list[tuple[int, int, dict]]:
    """(offset, timestamp ms, fields) of every record; REGISTERs with their dataVersion."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        fetch_max_bytes=64 << 20,
        max_partition_fetch_bytes=64 << 20,
    )
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    end = consumer.end_offsets([partition])[partition]
    out: list[tuple[int, int, dict]] = []
    while not out or out[-1][0] < end - 1:
        for records in consumer.poll(2000).values():
            for r in records:
                fields = {m[1].decode(): (m[3] or m[4]).decode() for m in FIELD.finditer(r.value)}
                if fields.get("eventType") == "REGISTER" and (v := VERSION.search(r.value)):
                    fields["dataVersion"] = json.loads(v[1])
                out.append((r.offset, r.timestamp, fields))
    consumer.close()
    return out


def _batches(run: Path) -> list[Batch]:
    commits: dict[int, int] = {}
    for path in (run / "warehouse" / "broker_live_table" / "_delta_log").glob("*.json"):
        actions = [json.loads(line) for line in path.read_text().splitlines()]
        txn = [a["txn"]["version"] for a in actions if "txn" in a]
        stamp = [a["commitInfo"]["timestamp"] for a in actions if "commitInfo" in a]
        if txn and stamp:
            commits[txn[0]] = stamp[0]
    out = []
    for path in (run / "checkpoint" / "offsets").iterdir():
        if not path.name.isdigit():
            continue
        lines = path.read_text().splitlines()
        meta, offsets = json.loads(lines[1]), json.loads(lines[2])
        (end,) = (o for per_topic in offsets.values() for o in per_topic.values())
        spark_wm = meta["batchWatermarkMs"]
        batch_id = int(path.name)
        out.append(
            Batch(
                batch_id,
                meta["batchTimestampMs"],
                spark_wm - 1 if spark_wm else 0,
                end,
                commits.get(batch_id),
            )
        )
    return sorted(out, key=lambda b: b.id)


def _pct(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {statistics.median(ordered):5.1f}  p95 {p95:5.1f}  max {ordered[-1]:5.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", help="the run's folder: <workdir>/<topic>")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--after-s", type=float, default=60.0)
    args = parser.parse_args()

    run = Path(args.run)
    records = _records(args.bootstrap, run.name)
    batches = [b for b in _batches(run) if b.commit_ms is not None]
    ends = [b.end_offset for b in batches]
    watermarks = [b.watermark for b in batches]  # never decrease
    first_ms = records[0][1]
    seen: set[tuple] = set()
    rows: list[tuple[float, float, float, float]] = []  # (sent s, total, send->read, read->commit)
    for offset, sent_ms, fields in records:
        version = fields.get("dataVersion")
        if version is None:
            continue
        key = (fields["brokerAddr"], *sorted(version.items()))
        if key in seen:
            continue
        seen.add(key)
        applied = bisect.bisect_left(watermarks, int(fields["eventTime"]))
        read = bisect.bisect_right(ends, offset)
        if (sent_ms - first_ms) / 1000 < args.after_s or applied == len(batches):
            continue
        if read == len(batches):
            continue
        commit = batches[applied].commit_ms
        start = batches[read].start_ms
        assert commit is not None
        rows.append(
            (
                (sent_ms - first_ms) / 1000,
                (commit - sent_ms) / 1000,
                (start - sent_ms) / 1000,
                (commit - start) / 1000,
            )
        )
    print(f"{len(rows)} changes sent after {args.after_s:.0f} s, {len(batches)} batches")
    print("  send -> broker_live_table commit       ", _pct([r[1] for r in rows]))
    print("  send -> start of the batch reading it  ", _pct([r[2] for r in rows]))
    print("  that start -> commit                   ", _pct([r[3] for r in rows]))
    for minute in range(int(args.after_s // 60), int(max(r[0] for r in rows) // 60) + 1):
        part = [r for r in rows if minute * 60 <= r[0] < (minute + 1) * 60]
        if part:
            print(
                f"  sent in minute {minute} ({len(part)}): total {_pct([r[1] for r in part])} | "
                f"send -> read p50 {statistics.median(r[2] for r in part):.1f} | "
                f"read -> commit {_pct([r[3] for r in part])}"
            )
    lengths = [b.start_ms - a.start_ms for a, b in zip(batches, batches[1:], strict=False)]
    print(f"  batch starts apart: median {statistics.median(lengths) / 1000:.1f} s")


if __name__ == "__main__":
    main()
