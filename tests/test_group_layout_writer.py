"""The job's Delta writer over the group layout (issue 36): what a fault of a 10 000-topic
group commits, read from the Delta log, and replays.

Three groups (one of 10 000 topics, two of 50) go through the shipped step and the real
writer (bench/fault_writer.py: `DeltaRouteWriter.merge_rows` per table, then
`derive_topic_queue`, then the progress row, as the job's foreachBatch runs them), next to
the same batches in the per-topic layout of before issue 36: topic_queue_table must hold the
same rows after every batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bench.fault_writer import Commit, FaultWarehouse, master_registration, step_changes
from routing_lib.core.catalog import (
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
)
from routing_lib.spark.group_files import group_folder

# a brokerName may be 255 characters of anything: no Hive partition folder could hold it
LONG_NAME = "small-b/'ü " + "n" * 244
BIG, SMALL_A, SMALL_B = "big", "small-a", LONG_NAME
ADDRESSES = {BIG: "10.0.0.1:10911", SMALL_A: "10.0.0.2:10911", SMALL_B: "10.0.0.3:10911"}


def register(at: int, group: str, topics: int, perm: dict[str, int] | None = None) -> dict:
    return master_registration(at, group, ADDRESSES[group], topics, perm)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: (r["broker_name"], r["topic"]))


class Both:
    """The same batches in the group layout and in the per-topic layout."""

    def __init__(self, root: Path) -> None:
        self.group = FaultWarehouse(root / "group")
        self.per_topic = FaultWarehouse(root / "per-topic", per_topic=True)

    def batch(self, records: list[dict[str, Any]], until: int) -> dict[str, list[Commit]]:
        self.per_topic.batch(records, until)
        commits = self.group.batch(records, until)
        assert _rows(self.group.table(TOPIC_QUEUE)) == _rows(self.per_topic.table(TOPIC_QUEUE))
        return commits

    def rows_written(self, table: str) -> int:
        """The source rows the group layout's last batch handed the writer for `table`."""
        return len(self.group.last_changes.get(table, []))


def _under(commit: Commit, group: str) -> bool:
    """Every file the commit added or removed is in the group's partition: its folder, the
    writer's (spark/group_files.py) or delta-rs's Hive one (a MERGE of a plain name)."""
    paths = [*commit.added, *commit.removed]
    folders = (f"{group_folder(group)}/", f"broker_name={group}/")
    return bool(paths) and all(p.startswith(folders) for p in paths)


@pytest.fixture
def fleet(tmp_path: Path) -> Both:
    both = Both(tmp_path)
    both.batch(
        [register(1_000, g, n) for g, n in ((BIG, 10_000), (SMALL_A, 50), (SMALL_B, 50))], 1_000
    )
    return both


def _heartbeats(at: int) -> list[dict]:
    """The small groups' re-sent registrations: nothing but broker_live_table changes."""
    return [register(at, SMALL_A, 50), register(at, SMALL_B, 50)]


def test_an_expiry_removes_the_groups_files_only_and_a_return_adds_its_partition(fleet: Both):
    # the big group sends nothing for 39 s: expired at 31 001; the small ones stay
    fleet.batch(_heartbeats(20_000), 20_000)
    commits = fleet.batch(_heartbeats(40_000), 40_000)
    assert commits[TOPIC_BASE] == [] and fleet.rows_written(TOPIC_BASE) == 0
    assert fleet.rows_written(TOPIC_OVERLAY) == 1 and len(commits[TOPIC_OVERLAY]) == 1
    assert fleet.rows_written(TOPIC_BASE_CHANGES) == 0 and commits[TOPIC_BASE_CHANGES] == []
    assert fleet.rows_written(TOPIC_OVERLAY_CHANGES) == 1
    (expiry,) = commits[TOPIC_QUEUE]
    assert _under(expiry, BIG) and not expiry.added  # the group's files removed, none added
    assert expiry.rows_removed == 10_000  # whole files: no row of it or another group copied
    assert not any(r["broker_name"] == BIG for r in fleet.group.table(TOPIC_QUEUE).to_pylist())

    # back with the same table: no base row written, its partition added back
    commits = fleet.batch([register(40_001, BIG, 10_000), *_heartbeats(40_001)], 40_001)
    assert commits[TOPIC_BASE] == [] and fleet.rows_written(TOPIC_BASE) == 0
    assert fleet.rows_written(TOPIC_OVERLAY) == 1 and fleet.rows_written(TOPIC_OVERLAY_CHANGES) == 1
    (back,) = commits[TOPIC_QUEUE]
    assert _under(back, BIG) and not back.removed and back.rows_added == 10_000


def test_a_perm_change_rewrites_one_partition_and_a_topic_change_one_base_partition(fleet: Both):
    wipe = {"eventType": "WIPE_WRITE_PERM", "eventTime": 2_000, "brokerName": BIG}
    commits = fleet.batch([wipe], 2_000)
    assert commits[TOPIC_BASE] == [] and fleet.rows_written(TOPIC_OVERLAY) == 1
    (wiped,) = commits[TOPIC_QUEUE]
    assert _under(wiped, BIG) and wiped.rows_removed == wiped.rows_added == 10_000
    perms = {
        r["perm"] for r in fleet.group.table(TOPIC_QUEUE).to_pylist() if r["broker_name"] == BIG
    }
    assert perms == {4}

    # one topic of a small group changed, one added: its base partition only
    changed = register(3_000, SMALL_A, 50, {"topic-00007": 4, "topic-new": 6})
    commits = fleet.batch([changed], 3_000)
    assert fleet.rows_written(TOPIC_BASE) == 2 and fleet.rows_written(TOPIC_BASE_CHANGES) == 2
    assert fleet.rows_written(TOPIC_OVERLAY) == 0
    (base,) = commits[TOPIC_BASE]
    assert _under(base, SMALL_A)
    (derived,) = commits[TOPIC_QUEUE]
    assert _under(derived, SMALL_A) and derived.rows_added == 51


def test_a_replayed_batch_writes_nothing_twice(fleet: Both):
    group = fleet.group
    group.batch(_heartbeats(20_000), 20_000)
    stepped = group.step(_heartbeats(40_000), 40_000)  # the big group expires
    rows = [r for out in stepped.values() for r in out]
    # a crash after the overlay's commit, before topic_queue_table's and the progress row
    batch_id = group.batch_id + 1

    overlay = step_changes(rows)[TOPIC_OVERLAY]
    assert len(overlay) == 1
    source = pa.Table.from_pylist([{**row, "op": op} for op, row in overlay])
    group.writer.merge_rows(batch_id, group.specs[TOPIC_OVERLAY], lambda: source)
    first = group.read_commits()
    assert len(first[TOPIC_OVERLAY]) == 1 and first[TOPIC_QUEUE] == []
    # the replay: every table's commit, the overlay's skipped, topic_queue_table derived
    # from what topic_base and topic_overlay hold
    group.commit(rows, 40_000)
    replayed = group.read_commits()
    assert replayed[TOPIC_OVERLAY] == [] and len(replayed[TOPIC_QUEUE]) == 1
    assert _under(replayed[TOPIC_QUEUE][0], BIG)
    # and once more, whole: no table gets a commit
    group.commit(rows, 40_000, batch_id=batch_id)
    assert all(commits == [] for commits in group.read_commits().values())
    fleet.per_topic.batch(_heartbeats(20_000), 20_000)
    fleet.per_topic.batch(_heartbeats(40_000), 40_000)
    assert _rows(group.table(TOPIC_QUEUE)) == _rows(fleet.per_topic.table(TOPIC_QUEUE))


def test_no_fault_decodes_or_derives_the_groups_topics(tmp_path: Path, monkeypatch):
    """The step's side: every fault of bench/group_fault_rows.py's script (expiry, return,
    role switch, master back, WIPE, ADD, unregister, return, the slave's return before its
    master's) on a 10 000-topic group neither decodes its topic table (but for a fault
    decided by rows: one decode, compared in C) nor computes its effective slice (no loop
    per topic), and hands the writer no topic_base row and one topic_overlay row."""
    import routing_lib.core.overlay as overlay_module
    from bench.group_fault_rows import FAULTS, FAULTS_BY_ROWS, fault_script
    from routing_lib.core.topic_table import TopicTable

    derived: list[int] = []
    effective = overlay_module.effective_rows

    def counted(*args: Any) -> Any:
        derived.append(1)
        return effective(*args)

    monkeypatch.setattr(overlay_module, "effective_rows", counted)
    warehouse = FaultWarehouse(tmp_path)
    for fault, records, until in fault_script(10_000):
        decodes, computed = TopicTable.decodes, len(derived)
        stepped = warehouse.step(records, until)
        changes = step_changes(r for rows in stepped.values() for r in rows)
        if fault in FAULTS:
            allowed = 1 if fault in FAULTS_BY_ROWS else 0
            assert TopicTable.decodes - decodes <= allowed, fault
            assert len(derived) == computed, fault
            assert TOPIC_BASE not in changes and len(changes[TOPIC_OVERLAY]) == 1, fault
            assert TOPIC_QUEUE not in changes and "topic_route_history" not in changes
