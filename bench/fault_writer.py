"""Broker-group faults through the shipped step and the job's real Delta writer, without
Spark, and what each batch's commits did to each table, read from the Delta log (issue 36).

`FaultWarehouse` steps the groups of each micro-batch (`step_group`, the groups with rows
and those whose wake-up has passed, as Spark calls them) and commits their rows with
`DeltaRouteWriter`: `merge_rows` per table (the MERGE the job's foreachBatch runs), then
`derive_topic_queue` (the touched groups' topic_queue_table partitions), then the progress
row. `DeltaLog` reads what every commit added and removed: files and their rows (a removed
file's rows from the add action that wrote it), so "rows rewritten" is files removed x rows.

Two layouts: the group layout (the job's: `StepConfig()` defaults, the STORED tables), and
the per-topic layout of before issue 36 (`per_topic=True`: the step's topic_queue_table and
topic_route_history rows, an unpartitioned topic_queue_table MERGEd by key), for the
comparison in bench/group_fault_rows.py and tests/test_group_layout_writer.py.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from routing_lib.core.admin import group_key
from routing_lib.core.catalog import (
    STORED,
    TOPIC_QUEUE,
    TOPIC_ROUTE_HISTORY,
    TableSpec,
    spec,
)
from routing_lib.core.columnar import bundle_rows
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
from routing_lib.core.tables import Row
from routing_lib.core.wire import externalize, pack_event
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.spark.delta_writer import DeltaRouteWriter
from schemas import TickEvent, parse_event

# large state values as content references (in this process's memory), as the job keeps them
MIN_CHARS = 4096
Change = tuple[str, Row]  # (op, row)


def step_changes(rows: Iterable[StepRow]) -> dict[str, list[Change]]:
    """The step's route and history rows per table, as the writer's MERGE takes them."""
    out: dict[str, list[Change]] = defaultdict(list)
    for r in rows:
        if r.kind in (RowKind.CHANGE, RowKind.HISTORY) and r.table is not None:
            out[r.table] += [(str(r.op), row) for row in bundle_rows(r.table, r.row_json)]
    return out


@dataclass
class Commit:
    """What one Delta commit did: files (and their rows) added and removed."""

    version: int
    operation: str
    added: dict[str, int] = field(default_factory=dict)  # path -> rows
    removed: dict[str, int] = field(default_factory=dict)  # path -> rows it held

    @property
    def rows_added(self) -> int:
        return sum(self.added.values())

    @property
    def rows_removed(self) -> int:
        return sum(self.removed.values())


class DeltaLog:
    """A table's `_delta_log`, read commit by commit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows_of: dict[str, int] = {}  # every file ever added -> its rows
        self.seen = -1  # the last version read

    def new_commits(self) -> list[Commit]:
        commits = []
        for log in sorted((self.path / "_delta_log").glob("*.json")):
            version = int(log.stem)
            if version <= self.seen:
                continue
            commit = Commit(version, "")
            for line in log.read_text().splitlines():
                action = json.loads(line)
                if "commitInfo" in action:
                    commit.operation = action["commitInfo"].get("operation", "")
                if "add" in action:
                    add = action["add"]
                    rows = json.loads(add["stats"])["numRecords"] if add.get("stats") else 0
                    self.rows_of[add["path"]] = commit.added[add["path"]] = rows
                if "remove" in action:
                    path = action["remove"]["path"]
                    commit.removed[path] = self.rows_of.get(path, 0)
            commits.append(commit)
            self.seen = version
        return commits


def master_registration(
    at: int, group: str, address: str, topics: int, perm: dict[str, int] | None = None
) -> dict[str, Any]:
    """A master's REGISTER of `topics` writable topics, some (`perm`) with another perm or
    added; the dataVersion counts the changed ones, so a changed table is a new version."""
    table = {f"topic-{i:05d}": {"topicName": f"topic-{i:05d}", "perm": 6} for i in range(topics)}
    for name, value in (perm or {}).items():
        table.setdefault(name, {"topicName": name})["perm"] = value
    return {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "C",
        "brokerAddr": address,
        "brokerName": group,
        "brokerId": 0,
        "heartbeatTimeoutMillis": 30_000,
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": 1 + len(perm or {})},
        "topicConfigTable": table,
    }


def _given(table: pa.Table) -> pa.Table:
    return table


def per_topic_specs() -> dict[str, TableSpec]:
    """The per-topic layout of before issue 36: an unpartitioned topic_queue_table and a
    stored topic_route_history, no group layout tables."""
    group_tables = {"topic_base", "topic_overlay", "topic_base_changes", "topic_overlay_changes"}
    specs = {s.name: s for s in STORED if s.name not in group_tables}
    specs[TOPIC_QUEUE] = replace(spec(TOPIC_QUEUE), partition_by=())
    specs[TOPIC_ROUTE_HISTORY] = replace(spec(TOPIC_ROUTE_HISTORY), derived_from=())
    return specs


class FaultWarehouse:
    """Groups stepped batch by batch and committed by the job's Delta writer into `root`."""

    def __init__(self, root: Path, per_topic: bool = False, app_id: str = "fault-bench") -> None:
        self.root = root
        self.per_topic = per_topic
        self.config = StepConfig(DEFAULT_FLAGS, group_facts=not per_topic)
        self.specs = per_topic_specs() if per_topic else {s.name: s for s in STORED}
        self.watermarks: dict[int, int] = {}
        self.writer = DeltaRouteWriter(str(root), app_id, self.watermarks.__getitem__)
        for table in self.specs.values():
            DeltaTable.create(
                str(root / table.name),
                arrow_schema(table),
                partition_by=list(table.partition_by) or None,
                configuration={"delta.enableChangeDataFeed": "true"},
            )
        self.logs = {name: DeltaLog(root / name) for name in self.specs}
        for log in self.logs.values():
            log.new_commits()  # the creation
        self.saved: dict[str, SavedGroup | None] = {}
        self.wake_ups: dict[str, int] = {}
        self.batch_id = -1
        self.published = 0
        self.position = 0
        self.last_changes: dict[str, list[Change]] = {}
        self.step_seconds = 0.0

    def step(self, records: list[dict[str, Any]], until: int) -> dict[str, list[StepRow]]:
        """One micro-batch's steps at watermark `until` (the rows not yet committed)."""
        inputs: dict[str, list[InputRow]] = defaultdict(list)
        for record in records:
            event = parse_event(json.dumps(record))
            assert not isinstance(event, TickEvent)
            payload = externalize(pack_event(event), None, 0)  # a reference, as stage one
            inputs[group_key(event)].append(
                InputRow(event.eventTime, ("f", self.position), payload)
            )
            self.position += 1
        due = {g for g, at in self.wake_ups.items() if at <= until}
        out: dict[str, list[StepRow]] = {}
        started = time.process_time()
        for group in sorted(inputs.keys() | due):
            self.wake_ups.pop(group, None)
            result = step_group(
                group,
                self.saved.get(group),
                inputs.get(group, []),
                BatchContext(until, self.published),
                self.config,
                (),
                HeldContent(None, MIN_CHARS),
            )
            self.saved[group] = result.state
            if result.wake_up is not None:
                self.wake_ups[group] = result.wake_up
            out[group] = result.rows
        self.step_seconds = time.process_time() - started  # CPU: the machine may be loaded
        return out

    def commit(self, rows: Iterable[StepRow], until: int, batch_id: int | None = None) -> None:
        """The writer's commits of one batch (`batch_id`: a replay of an earlier one)."""
        if batch_id is None:
            self.batch_id += 1
            batch_id = self.batch_id
        changes = step_changes(rows)
        self.last_changes = changes
        touched: set[str] = set()
        for table, table_changes in changes.items():
            schema = arrow_schema(self.specs[table]).insert(0, pa.field("op", pa.string()))
            arrow = pa.Table.from_pylist(
                [{**row, "op": op} for op, row in table_changes], schema=schema
            )
            touched |= self.writer.merge_rows(batch_id, self.specs[table], partial(_given, arrow))
        self.writer.derive_topic_queue(batch_id, touched)
        self.watermarks[batch_id] = until
        self.writer.append_progress(batch_id, until, {})
        self.published = max(self.published, until)

    def batch(self, records: list[dict[str, Any]], until: int) -> dict[str, list[Commit]]:
        """Step and commit one micro-batch; each table's commits."""
        stepped = self.step(records, until)
        self.commit([r for rows in stepped.values() for r in rows], until)
        return self.read_commits()

    def read_commits(self) -> dict[str, list[Commit]]:
        return {name: log.new_commits() for name, log in self.logs.items()}

    def table(self, name: str) -> pa.Table:
        return DeltaTable(str(self.root / name)).to_pyarrow_table()
