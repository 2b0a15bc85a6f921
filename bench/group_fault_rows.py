"""Rows a fault of one large broker group writes, per fault kind: today's per-topic layout
against base + overlay (routing_lib/core/group_facts.py, issue 36), without Spark.

    .venv/bin/python -m bench.group_fault_rows --topics 10000

One group (a master and a slave, acting master enabled) goes through: its first
registration, an expiry, a return with the same table, the master's unregister (the
acting-master wipe), the master's return, an admin WIPE_WRITE_PERM and ADD_WRITE_PERM, an
unregister of both addresses, a return, a topic change (one topic's perm changed, one
topic added), and a return where the slave registers before its master. Each fault is one
micro-batch of the shipped step (`step_group`, topic tables as content references, as stage
one sends them). Printed per fault:

* today: topic_queue_table rows changed and topic_route_history rows written (upserts,
  closes, deletes) by the step's rows;
* base + overlay: route rows written (base rows upserted or deleted + overlay rows) and
  history rows written (base-row and overlay intervals opened or closed), from the step's
  group-level facts; and the facts themselves (overlay changes, base-row changes).

Counts do not depend on the machine's load; the wall time per fault is printed for scale.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fault_writer import FaultWarehouse
from routing_lib.core.catalog import (
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.columnar import bundle_rows
from routing_lib.core.group_facts import (
    BaseRowChange,
    GroupOverlayChange,
    NormalisedHistory,
    RouteState,
)
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.core.rows import RowKind, StepRow
from routing_lib.core.step import (
    BatchContext,
    HeldContent,
    InputRow,
    SavedGroup,
    StepConfig,
    step_group,
)
from routing_lib.core.tables import TOPIC_QUEUE
from routing_lib.core.wire import externalize, pack_event
from schemas import TickEvent, parse_event

GROUP = "big"
MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"
INLINE = 1 << 62  # state values stay inline (no content folder): counts are the same

FAULTS = (
    "expiry",
    "return",
    "role switch (master gone: acting-master wipe)",
    "master back (promotion undone)",
    "perm change (WIPE_WRITE_PERM)",
    "perm change (ADD_WRITE_PERM)",
    "unregister (the group's last address)",
    "return (again)",
    "return, the slave first (acting-master wipe)",
    "its master back after it",
)
# Faults decided by comparing rows, not by reference: the registration's content is new (the
# slave's), so the group's base is decoded once and compared with it in C (no loop per topic).
FAULTS_BY_ROWS = ("return, the slave first (acting-master wipe)",)


def register_record(at: int, addr: str, broker_id: int, topics: int) -> dict[str, Any]:
    """A REGISTER of the group's `topics` writable topics (30 s heartbeat timeout)."""
    return {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "C",
        "brokerAddr": addr,
        "brokerName": GROUP,
        "brokerId": broker_id,
        "enableActingMaster": True,
        "heartbeatTimeoutMillis": 30_000,
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": at},
        "topicConfigTable": {
            f"topic-{i:05d}": {"topicName": f"topic-{i:05d}", "perm": 6} for i in range(topics)
        },
    }


def _unregister(at: int, addr: str, broker_id: int) -> dict[str, Any]:
    return {
        "eventType": "UNREGISTER",
        "eventTime": at,
        "clusterName": "C",
        "brokerAddr": addr,
        "brokerName": GROUP,
        "brokerId": broker_id,
    }


def _count(rows: list[StepRow], kind: RowKind, table: str) -> int:
    return sum(
        len(bundle_rows(table, r.row_json)) for r in rows if r.kind == kind and r.table == table
    )


class FaultCounter:
    """One group's step, fault by fault (each in its own micro-batch), counting what each
    writes in both layouts."""

    def __init__(self) -> None:
        self.saved: SavedGroup | None = None
        self.watermark = 0
        self.position = 0
        self.route_state = RouteState()
        self.normalised = NormalisedHistory()

    def fault(self, records: list[dict[str, Any]], until: int) -> dict[str, float]:
        rows = []
        for record in records:
            event = parse_event(json.dumps(record))
            assert not isinstance(event, TickEvent)
            payload = externalize(pack_event(event), None, 0)  # a reference, as stage one
            rows.append(InputRow(event.eventTime, ("file", self.position), payload))
            self.position += 1
        context = BatchContext(until, self.watermark)
        started = time.perf_counter()
        result = step_group(
            GROUP,
            self.saved,
            rows,
            context,
            StepConfig(DEFAULT_FLAGS, per_topic_rows=True),
            (),
            HeldContent(None, INLINE),
        )
        elapsed = time.perf_counter() - started
        self.saved, self.watermark = result.state, until
        route_before = self.route_state.rows_written
        history_before = self.normalised.rows_written
        self.route_state.apply(result.facts)
        self.normalised.apply(result.facts)
        return {
            "today route rows": _count(result.rows, RowKind.CHANGE, TOPIC_QUEUE),
            "today history rows": _count(result.rows, RowKind.HISTORY, TOPIC_ROUTE_HISTORY),
            "route rows": self.route_state.rows_written - route_before,
            "history rows": self.normalised.rows_written - history_before,
            "overlay facts": sum(isinstance(f, GroupOverlayChange) for f in result.facts),
            "base facts": sum(isinstance(f, BaseRowChange) for f in result.facts),
            "step s": elapsed,
        }


Script = list[tuple[str, list[dict[str, Any]], int]]  # (fault, records, watermark)


def fault_script(topics: int) -> Script:
    """The faults of the module doc, in order: each one micro-batch's records and the
    watermark it ends at."""
    script: Script = []
    t = 1_000
    first = [register_record(t, MASTER, 0, topics), register_record(t, SLAVE, 1, topics)]
    script.append(("first registration", first, t))
    t += 60_000  # no heartbeat: both expire together
    script.append(("expiry", [], t))
    both = [register_record(t + 1, MASTER, 0, topics), register_record(t + 1, SLAVE, 1, topics)]
    script.append(("return", both, t + 1))
    t += 1
    role_switch = "role switch (master gone: acting-master wipe)"
    script.append((role_switch, [_unregister(t + 1, MASTER, 0)], t + 1))
    t += 1
    script.append(
        ("master back (promotion undone)", [register_record(t + 1, MASTER, 0, topics)], t + 1)
    )
    t += 1
    wipe = {"eventType": "WIPE_WRITE_PERM", "eventTime": t + 1, "brokerName": GROUP}
    script.append(("perm change (WIPE_WRITE_PERM)", [wipe], t + 1))
    t += 1
    add = {**wipe, "eventType": "ADD_WRITE_PERM", "eventTime": t + 1}
    script.append(("perm change (ADD_WRITE_PERM)", [add], t + 1))
    t += 1
    both_gone = [_unregister(t + 1, SLAVE, 1), _unregister(t + 2, MASTER, 0)]
    script.append(("unregister (the group's last address)", both_gone, t + 2))
    t += 2
    script.append(("return (again)", [register_record(t + 1, MASTER, 0, topics)], t + 1))
    t += 1
    changed = register_record(t + 1, MASTER, 0, topics)
    changed["topicConfigTable"]["topic-00000"]["perm"] = 4
    changed["topicConfigTable"]["topic-new"] = {"topicName": "topic-new", "perm": 6}
    script.append(("topic change (one changed, one added)", [changed], t + 1))
    t += 1
    both_gone = [_unregister(t + 1, SLAVE, 1), _unregister(t + 2, MASTER, 0)]
    script.append(("unregister (again)", both_gone, t + 2))
    t += 2
    # The slave comes back first and sets the table wiped. Its configs carry a field that is
    # no part of a route (`order`): another content than the master's, the same rows, as the
    # partition run's slaves sent (the shortcut by reference cannot decide it).
    slave = {
        **changed,
        "eventTime": t + 1,
        "brokerAddr": SLAVE,
        "brokerId": 1,
        "topicConfigTable": {
            name: {**config, "order": True} for name, config in changed["topicConfigTable"].items()
        },
    }
    script.append(("return, the slave first (acting-master wipe)", [slave], t + 1))
    t += 1
    script.append(("its master back after it", [{**changed, "eventTime": t + 1}], t + 1))
    return script


def per_fault_rows(topics: int) -> dict[str, dict[str, float]]:
    """What each fault kind writes for one `topics`-topic group (see the module doc)."""
    counter = FaultCounter()
    return {fault: counter.fault(records, until) for fault, records, until in fault_script(topics)}


# ---- through the job's Delta writer ---------------------------------------------------------

# The tables a fault's topic routes go to, per layout.
PER_TOPIC_TABLES = (TOPIC_QUEUE, TOPIC_ROUTE_HISTORY)
GROUP_LAYOUT_TABLES = (
    TOPIC_BASE,
    TOPIC_OVERLAY,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
)


def _other_group(at: int, name: str, topics: int) -> dict[str, Any]:
    """Another group's registration, re-sent with the same dataVersion (a heartbeat)."""
    record = register_record(at, f"{name}:10911", 0, topics)
    return {
        **record,
        "brokerName": name,
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": 1},
    }


def with_other_groups(script: Script, others: int, topics: int) -> Script:
    """The script with `others` groups of `topics` topics beside the faulting one, kept alive
    by a re-sent registration in every batch (and one more batch before the expiry)."""
    names = [f"other-{n}" for n in range(others)]
    out: Script = []
    for n, (fault, records, until) in enumerate(script):
        if n == 1:  # before the expiry: the others only
            out.append(
                (
                    "(keep-alive)",
                    [_other_group(until - 30_000, g, topics) for g in names],
                    until - 30_000,
                )
            )
        out.append((fault, [*records, *(_other_group(until, g, topics) for g in names)], until))
    return out


@dataclass
class TableWrites:
    """What one batch did to one table: rows handed to the writer, and its commits as the
    Delta log says (files removed, the rows they held, rows added)."""

    source_rows: int = 0
    files_removed: int = 0
    rows_removed: int = 0
    rows_added: int = 0

    def cell(self) -> str:
        return (
            f"{self.source_rows} / {self.files_removed}x -> -{self.rows_removed} +{self.rows_added}"
        )


def writer_rows(
    topics: int, others: int, root: Path, steps: dict[str, dict[str, float]] | None = None
) -> dict[str, dict[str, dict[str, TableWrites]]]:
    """fault -> layout ("per-topic", "group") -> table -> what the batch wrote; `steps`
    gets fault -> layout -> the batch's step CPU seconds."""
    script = with_other_groups(fault_script(topics), others, topics)
    steps = {} if steps is None else steps
    out: dict[str, dict[str, dict[str, TableWrites]]] = {}
    for layout, tables in (("per-topic", PER_TOPIC_TABLES), ("group", GROUP_LAYOUT_TABLES)):
        warehouse = FaultWarehouse(root / layout, per_topic=layout == "per-topic")
        for fault, records, until in script:
            commits = warehouse.batch(records, until)
            per_table = {}
            for table in tables:
                writes = TableWrites(len(warehouse.last_changes.get(table, [])))
                for commit in commits[table]:
                    writes.files_removed += len(commit.removed)
                    writes.rows_removed += commit.rows_removed
                    writes.rows_added += commit.rows_added
                per_table[table] = writes
            out.setdefault(fault, {})[layout] = per_table
            steps.setdefault(fault, {})[layout] = warehouse.step_seconds
    return out


def _print_writer_rows(topics: int, others: int) -> None:
    steps: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        rows = writer_rows(topics, others, Path(folder), steps)
    print(
        f"\nThrough the job's Delta writer ({topics} topics, {others} other groups of as many): "
        "per table, rows handed to the writer / files removed x -> rows they held removed, "
        "rows added (read from the Delta log)\n"
    )
    for layout, tables in (("per-topic", PER_TOPIC_TABLES), ("group", GROUP_LAYOUT_TABLES)):
        print(f"| fault ({layout} layout) | " + " | ".join(tables) + " | step s |")
        print("|---" * (len(tables) + 2) + "|")
        for fault, by_layout in rows.items():
            if fault.startswith("("):
                continue
            cells = " | ".join(by_layout[layout][t].cell() for t in tables)
            print(f"| {fault} | {cells} | {steps[fault][layout]:.2f} |")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=2, help="other groups beside it")
    parser.add_argument("--no-writer", action="store_true", help="the step's counts only")
    args = parser.parse_args()
    columns = [
        "today route rows",
        "today history rows",
        "route rows",
        "history rows",
        "overlay facts",
        "base facts",
    ]
    print(f"| fault ({args.topics} topics) | " + " | ".join(columns) + " | step s |")
    print("|---" * (len(columns) + 2) + "|")
    for fault, counts in per_fault_rows(args.topics).items():
        cells = " | ".join(f"{int(counts[c])}" for c in columns)
        print(f"| {fault} | {cells} | {counts['step s']:.2f} |")
    if not args.no_writer:
        _print_writer_rows(args.topics, args.others)


if __name__ == "__main__":
    main()
