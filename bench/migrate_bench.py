"""What `routectl migrate` costs on a synthetic per-topic warehouse (routing_lib/migrate.py).

    .venv/bin/python -m bench.migrate_bench --groups 100 --topics 1000

Each of the groups' topics has two versions in topic_route_history (registered, expired,
registered again and open) and one topic_queue_table row; no checkpoint state (trivial
overlays). Printed: the report, the migration's wall and CPU seconds and the process's peak
RSS (the synthetic tables built beforehand included).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from routing_lib.core.catalog import PROGRESS, TOPIC_QUEUE, TOPIC_ROUTE_HISTORY
from routing_lib.core.history import event_date
from routing_lib.core.tables import Row
from routing_lib.migrate import migrate
from routing_lib.read.arrow_schema import arrow_schema

REGISTERED, EXPIRED, BACK = 1_764_000_000_000, 1_764_000_100_000, 1_764_000_200_000
CDF = {"delta.enableChangeDataFeed": "true"}


def _version(queue: Row, start: int, end: int | None) -> Row:
    ended = end is not None
    return {
        **queue,
        "valid_from": start,
        "valid_to": end,
        "started_by": "TOPIC_ADDED",
        "start_event": "REGISTER",
        "start_broker_addr": "10.0.0.1:10911",
        "ended_by": "GROUP_REMOVED" if ended else None,
        "end_event": "EXPIRE" if ended else None,
        "end_broker_addr": "10.0.0.1:10911" if ended else None,
        "event_date": event_date(start),
    }


def write_warehouse(root: Path, groups: int, topics: int) -> None:
    history: list[Row] = []
    queue: list[Row] = []
    for g in range(groups):
        for t in range(topics):
            row: Row = {
                "topic": f"topic-{t}",
                "broker_name": f"broker-{g}",
                "read_queue_nums": 8,
                "write_queue_nums": 8,
                "perm": 6,
                "topic_sys_flag": 0,
            }
            history += [_version(row, REGISTERED, EXPIRED), _version(row, BACK, None)]
            queue.append(row)
    progress = [{"batch_id": 0, "watermark": BACK, "committed_at_ms": 1}]
    for table, rows, partition_by in (
        (TOPIC_ROUTE_HISTORY, history, ["event_date"]),
        (TOPIC_QUEUE, queue, None),
        (PROGRESS, progress, None),
    ):
        data = pa.Table.from_pylist(rows, arrow_schema(table))
        write_deltalake(str(root / table), data, partition_by=partition_by, configuration=CDF)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--topics", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_warehouse(root, args.groups, args.topics)
        wall, cpu = time.perf_counter(), time.process_time()
        report = migrate(root, None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print("\n".join(report.lines()))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"migration: {wall:.1f} s wall, {cpu:.1f} s CPU; peak RSS {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
