"""`routectl migrate`: upgrade a warehouse of the per-topic layout to the group layout
(issue 36), in place, with delta-rs (docs/operations.md, "Upgrading a warehouse to the group
layout (issue 36)").

What it writes, every table with Change Data Feed on as the job creates them:

* `topic_base_changes` / `topic_overlay_changes`: the stored topic_route_history as facts
  (routing_lib/migrate_facts.py), checked to derive back to the stored rows, row for row,
  before anything is written; plus one anchor per group at the last published watermark;
* `topic_overlay`: one row per group with a base (the checkpoint's overlay, else trivial);
* `topic_queue_table`: the same rows, re-written partitioned by broker_name (a new table
  version: earlier versions stay readable by time travel until VACUUM; the table's
  configuration and the job's txn versions are kept);
* `topic_base` last: its existence marks the warehouse migrated (routing_lib/layout.py).

The stored topic_route_history is left in place, untouched, as an archive: nothing reads it
after the migration (its rows are derived from the change tables), and it keeps the Delta
history of the per-topic layout for whoever wants it; delete the folder when done.

Idempotent: a migrated warehouse is left alone; one whose migration stopped half-way (no
topic_base yet) is migrated again from the same stored tables (every write overwrites).
The job must be stopped (`check_stopped`: no batch in flight in its checkpoint, no progress
row committed recently).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, write_deltalake
from deltalake.exceptions import TableNotFoundError

from routing_lib import storage
from routing_lib.core.catalog import (
    PROGRESS,
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
    TOPIC_ROUTE_HISTORY,
    spec,
)
from routing_lib.core.fact_rows import base_row, fact_row, overlay_row, queue_of_row
from routing_lib.core.group_facts import GroupFact, GroupOverlayChange
from routing_lib.core.overlay import TRIVIAL, GroupTopics
from routing_lib.core.tables import Row
from routing_lib.core.topic_table import QueueData
from routing_lib.layout import old_layout_reason
from routing_lib.migrate_facts import NotReproducible, migrate_group
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.spark.checkpoint import batch_ids
from routing_lib.spark.group_files import PARTITION, hive_safe, replace_groups

# A progress row committed this recently says the job may still be running.
DEFAULT_QUIET_S = 120.0
_CDF = {"delta.enableChangeDataFeed": "true"}


class JobMayBeRunning(RuntimeError):
    """The checkpoint or the warehouse says the job may be writing: stop it first."""


@dataclass
class MigrationReport:
    warehouse: str
    already: bool = False  # the warehouse was of the group layout: nothing done
    dry_run: bool = False
    from_state: bool = False  # bases and overlays from the checkpoint's state
    anchored_at: int = 0
    groups: int = 0
    history_rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # rows written per table

    def lines(self) -> list[str]:
        if self.already:
            return [f"{self.warehouse}: already of the group layout, nothing to do"]
        verb = "would write" if self.dry_run else "wrote"
        source = "the checkpoint's state" if self.from_state else "topic_queue_table (trivial)"
        lines = [
            f"{self.warehouse}: {self.history_rows} topic_route_history rows of {self.groups} "
            f"groups derive back exactly; bases and overlays from {source}, anchored at "
            f"{self.anchored_at}"
        ]
        lines += [f"  {verb} {table}: {n} rows" for table, n in self.counts.items()]
        return lines


def check_stopped(warehouse: str, checkpoint: str | None, quiet_s: float = DEFAULT_QUIET_S) -> None:
    """Refuse (JobMayBeRunning) while the job may be running: a batch in the checkpoint's
    offset log without its commit (in flight, or interrupted: its replay must run on the
    version that started it), or a progress row committed less than `quiet_s` ago. Nothing
    here can see a job that is starting up: stop it first."""
    if checkpoint is not None:
        offsets = batch_ids(checkpoint, "offsets")
        commits = committed_batches(checkpoint)
        if offsets and (not commits or max(offsets) > max(commits)):
            raise JobMayBeRunning(
                f"checkpoint {checkpoint}: batch {max(offsets)} was started and not committed "
                "(the job is running, or stopped inside a batch). Let the job finish the batch "
                "(restart it with the version that wrote the warehouse, wait for a batch to "
                "publish), stop it, then migrate"
            )
    committed = _last_progress_commit_ms(warehouse)
    if committed is not None and time.time() * 1000 - committed < quiet_s * 1000:
        age = (time.time() * 1000 - committed) / 1000
        raise JobMayBeRunning(
            f"the job published a batch {age:.0f} s ago (route_progress): stop it first; "
            f"migrate refuses within {quiet_s:g} s of the last batch (--quiet-s)"
        )


def committed_batches(checkpoint: str) -> list[int]:
    """The batch ids of the checkpoint's commit log."""
    return batch_ids(checkpoint, "commits")


def _last_progress_commit_ms(warehouse: str) -> int | None:
    committed = pc.max(_arrow(warehouse, PROGRESS).column("committed_at_ms")).as_py()
    return None if committed is None else int(committed)


def _published_watermark(warehouse: str) -> int:
    watermark = pc.max(_arrow(warehouse, PROGRESS).column("watermark")).as_py()
    return 0 if watermark is None else int(watermark)


def _arrow(warehouse: str, table: str) -> pa.Table:
    """The table's current rows as Arrow (empty, with the catalog's schema, when absent)."""
    try:
        delta = storage.open_delta(storage.join(warehouse, table))
    except TableNotFoundError:
        return arrow_schema(table).empty_table()
    data: pa.Table = delta.to_pyarrow_table()
    return data


def _by_group(data: pa.Table) -> dict[str, pa.Table]:
    """The rows of each broker_name, as zero-copy slices of the sorted table: the rows of one
    group at a time become Python objects, whatever the warehouse's size."""
    if data.num_rows == 0:
        return {}
    data = data.sort_by("broker_name")
    runs = pc.run_end_encode(data.column("broker_name").combine_chunks())
    out: dict[str, pa.Table] = {}
    start = 0
    for name, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
        out[name] = data.slice(start, end - start)
        start = end
    return out


def _last_point(history: pa.Table) -> int:
    points = [pc.max(history.column(c)).as_py() for c in ("valid_from", "valid_to")]
    return max((int(p) for p in points if p is not None), default=0)


def _rows(table: str, rows: list[Row]) -> pa.Table:
    schema = arrow_schema(table)
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema)


def plan(
    warehouse: str, states: Mapping[str, GroupTopics] | None
) -> tuple[MigrationReport, dict[str, pa.Table]]:
    """Every table of the group layout, checked (NotReproducible when the stored history
    cannot be derived back exactly, or the state disagrees with the tables)."""
    history = _arrow(warehouse, TOPIC_ROUTE_HISTORY)
    queue = _arrow(warehouse, TOPIC_QUEUE)
    if history.num_rows == 0 and queue.num_rows:
        raise NotReproducible(
            [
                f"topic_route_history is empty while topic_queue_table holds {queue.num_rows} "
                "rows (a job run without history?): the history cannot be derived"
            ],
            1,
        )
    at = max(_published_watermark(warehouse), _last_point(history))
    history_of, queue_of = _by_group(history), _by_group(queue)
    groups = sorted(history_of.keys() | queue_of.keys() | (states or {}).keys())
    columns = spec(TOPIC_ROUTE_HISTORY).column_names
    out: dict[str, list[pa.Table]] = {name: [] for name in GROUP_TABLES}
    problems: list[str] = []
    for group in groups:
        effective = {
            row["topic"]: queue_of_row(row)
            for row in (queue_of[group].to_pylist() if group in queue_of else [])
        }
        state = None if states is None else states.get(group)
        if states is not None and state is None and effective:
            problems.append(f"group {group}: in topic_queue_table, not in the checkpoint state")
            continue
        rows = history_of[group].to_pylist() if group in history_of else []
        done = migrate_group(group, rows, effective, state, at, columns)
        problems += done.problems
        if problems:
            continue  # go on checking; nothing will be written
        for name, table_rows in _group_rows(group, done.facts, effective, state).items():
            out[name].append(_rows(name, table_rows))
    if problems:
        raise NotReproducible(problems, len(problems))
    tables = {
        name: pa.concat_tables(parts) if parts else arrow_schema(name).empty_table()
        for name, parts in out.items()
    }
    tables[TOPIC_QUEUE] = queue
    report = MigrationReport(
        warehouse,
        from_state=states is not None,
        anchored_at=at,
        groups=len(groups),
        history_rows=history.num_rows,
        counts={name: tables[name].num_rows for name in WRITE_ORDER},
    )
    return report, tables


# The order of the writes: topic_base last marks the warehouse migrated.
WRITE_ORDER = (TOPIC_BASE_CHANGES, TOPIC_OVERLAY_CHANGES, TOPIC_OVERLAY, TOPIC_QUEUE, TOPIC_BASE)
GROUP_TABLES = (TOPIC_BASE_CHANGES, TOPIC_OVERLAY_CHANGES, TOPIC_OVERLAY, TOPIC_BASE)


def _group_rows(
    group: str,
    facts: list[GroupFact],
    effective: Mapping[str, QueueData],
    state: GroupTopics | None,
) -> dict[str, list[Row]]:
    """One group's rows of the group layout's tables: its facts as change rows; its base and
    overlay (the state's, else the effective rows under a trivial overlay); no overlay row
    without a base, as the job keeps them."""
    if state is None:
        base, overlay = dict(effective), TRIVIAL
    else:
        base, overlay = dict(state.base.rows()), state.overlay
    return {
        TOPIC_BASE_CHANGES: [fact_row(f) for f in facts if not _is_overlay(f)],
        TOPIC_OVERLAY_CHANGES: [fact_row(f) for f in facts if _is_overlay(f)],
        TOPIC_OVERLAY: [overlay_row(group, overlay)] if base else [],
        TOPIC_BASE: [base_row(group, topic, q) for topic, q in base.items()],
    }


def _is_overlay(fact: GroupFact) -> bool:
    return isinstance(fact, GroupOverlayChange)


def write_tables(warehouse: str, tables: Mapping[str, pa.Table]) -> None:
    for name in WRITE_ORDER:
        path = storage.join(warehouse, name)
        rows = tables[name].select(arrow_schema(name).names).cast(arrow_schema(name))
        placed = _unsafe_groups(rows) if spec(name).partition_by == (PARTITION,) else set()
        if placed:  # their rows go in a second commit, at folders the writer picks
            unsafe = pc.is_in(rows.column(PARTITION), pa.array(sorted(placed)))
            rows, placed_rows = rows.filter(pc.invert(unsafe)), rows.filter(unsafe)
        write_deltalake(
            storage.delta_uri(path),
            rows,
            mode="overwrite",
            schema_mode="overwrite",
            partition_by=list(spec(name).partition_by),
            configuration=_CDF,
            storage_options=storage.delta_storage_options(path),
        )
        if placed:
            replace_groups(storage.open_delta(path), path, placed, placed_rows, CommitProperties())


def _unsafe_groups(rows: pa.Table) -> set[str]:
    """The groups whose names no Hive folder can hold: delta-rs's write_deltalake would fail
    on them ("File name too long"), so their files are placed as the job places them
    (routing_lib/spark/group_files.py)."""
    names = pc.unique(rows.column(PARTITION)).to_pylist()
    return {str(n) for n in names if not hive_safe(str(n))}


def migrate(
    warehouse: str | Path,
    states: Mapping[str, GroupTopics] | None,
    dry_run: bool = False,
) -> MigrationReport:
    """Migrate the warehouse (the caller has checked that the job is stopped and read the
    checkpoint's states: None when it has none, every group then trivial)."""
    root = str(warehouse)
    if old_layout_reason(root) is None:
        return MigrationReport(root, already=True)
    report, tables = plan(root, states)
    report.dry_run = dry_run
    if not dry_run:
        write_tables(root, tables)
    return report
