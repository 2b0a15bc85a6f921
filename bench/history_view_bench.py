"""What reading the derived topic_route_history costs (issue 36, read/route_history.py).

A synthetic warehouse of the group layout's change tables, written with delta-rs from core
facts (`fact_row`): G groups x N topics registered once, then F faults per group cycling
through expiry, return, WIPE_WRITE_PERM, ADD_WRITE_PERM (one overlay row each), and a topic
change of 10 topics every 5th fault (base rows). Times, per reader:

* as-of at T by the as-of path (`route_rows_at`: the last base row and overlay <= T, joined in
  Arrow) against derive-and-filter (`read_history`, then the rows valid at T);
* one topic's history (`topic_history_rows`: pushed down to the topic and its groups).

    .venv/bin/python -m bench.history_view_bench --groups 20 --topics 10000 --faults 100
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from routing_lib.core.catalog import PROGRESS, TOPIC_BASE_CHANGES, TOPIC_OVERLAY_CHANGES
from routing_lib.core.fact_rows import fact_row
from routing_lib.core.group_facts import BaseRowChange, GroupFact, GroupOverlayChange
from routing_lib.core.overlay import PermOp
from routing_lib.core.tables import Row
from routing_lib.core.topic_table import QueueData
from routing_lib.read import route_history
from routing_lib.read.arrow_schema import arrow_schema

START_MS = 1_764_000_000_000
FAULT_GAP_MS = 60_000
# (present, perm_op, cause) of the faults, in turn
FAULTS = (
    (False, PermOp.ID, "EXPIRED"),
    (True, PermOp.ID, "REGISTER"),
    (True, PermOp.WIPE, "WIPE_WRITE_PERM"),
    (True, PermOp.RW, "ADD_WRITE_PERM"),
)
T = TypeVar("T")


def facts(groups: int, topics: int, faults: int) -> Iterator[GroupFact]:
    queue = QueueData(8, 8, 6, 0)
    for g in range(groups):
        group, addr = f"broker-{g}", f"10.0.{g}.1:10911"
        register = ("REGISTER", addr)
        for n in range(topics):
            yield BaseRowChange(group, f"topic-{n}", queue, START_MS, 0, register)
        for f in range(faults):
            at = START_MS + (f + 1) * FAULT_GAP_MS + g
            present, op, kind = FAULTS[f % len(FAULTS)]
            yield GroupOverlayChange(group, present, op, None, at, 0, (kind, addr))
            if f % 5 == 4:  # a topic change: 10 topics' queue numbers
                changed = QueueData(16, 16, 6, 0)
                for n in range(f, f + 10):
                    yield BaseRowChange(group, f"topic-{n % topics}", changed, at, 1, register)


def write_warehouse(root: Path, groups: int, topics: int, faults: int) -> tuple[int, int]:
    base: list[Row] = []
    overlay: list[Row] = []
    for fact in facts(groups, topics, faults):
        (overlay if isinstance(fact, GroupOverlayChange) else base).append(fact_row(fact))
    for table, rows in ((TOPIC_BASE_CHANGES, base), (TOPIC_OVERLAY_CHANGES, overlay)):
        data = pa.Table.from_pylist(rows, schema=arrow_schema(table))
        write_deltalake(root / table, data, partition_by=["event_date"])
    write_deltalake(root / PROGRESS, arrow_schema(PROGRESS).empty_table())
    return len(base), len(overlay)


def _valid_at(table: pa.Table, at: int) -> pa.Array:
    """core.as_of.valid_at as an Arrow mask."""
    started = pc.less_equal(table["valid_from"], at)
    return pc.and_(
        started, pc.or_kleene(pc.is_null(table["valid_to"]), pc.greater(table["valid_to"], at))
    )


def timed(run: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    out = run()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--faults", type=int, default=100, help="per group")
    parser.add_argument(
        "--derive", action="store_true", help="also derive the whole history and filter it"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (base_rows, overlay_rows), write_s = timed(
            lambda: write_warehouse(root, args.groups, args.topics, args.faults)
        )
        print(
            f"{args.groups} groups x {args.topics} topics, {args.faults} faults per group: "
            f"{base_rows:,} base change rows, {overlay_rows:,} overlay change rows "
            f"(written in {write_s:.1f} s); load {os.getloadavg()[0]:.1f}"
        )
        # after a WIPE_WRITE_PERM of every group, half way: every route there, wiped
        middle = START_MS + (4 * (args.faults // 8) + 3) * FAULT_GAP_MS + args.groups
        for at in (START_MS, middle, START_MS + (args.faults + 1) * FAULT_GAP_MS):
            rows, took = timed(lambda at=at: route_history.route_rows_at(root, at))  # type: ignore[misc]
            print(f"as-of path at T={at}: {len(rows):,} routes in {took:.2f} s")
        history, took = timed(lambda: route_history.topic_history_rows(root, "topic-9"))
        print(f"one topic's history: {len(history):,} rows in {took:.2f} s")
        if args.derive:
            table, took = timed(lambda: route_history.read_history(root))
            print(f"derive the whole topic_route_history: {table.num_rows:,} rows in {took:.1f} s")
            rows, filter_s = timed(lambda: table.filter(_valid_at(table, middle)).to_pylist())
            print(f"  then the rows valid at T={middle}: {len(rows):,} in {filter_s:.1f} s more")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS {peak:,.0f} MB; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
