"""A base change of many topics (a group re-registering its table with every perm changed, a
new group, a DELETE_TOPIC of many) costs the lookup vectorised work (issue 36): the new base
entries built from the change rows' arrays, the counts carried by per-group differences.
The answers must be those of a replay: each change row applied in commit order, and a fresh
load of the same versions."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY
from routing_lib.core.fact_rows import base_row, overlay_row
from routing_lib.core.overlay import Overlay, PermOp
from routing_lib.core.tables import TOPIC_QUEUE
from routing_lib.core.topic_table import QueueData
from routing_lib.lookup.base_changes import changed_entries
from routing_lib.lookup.base_index import QUEUE_COLUMNS, BaseIndex
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.route_risk import RouteRisks
from routing_lib.lookup.route_topics import RouteTopics
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.snapshots import load_index, next_index
from routing_lib.lookup.topic_store import Entry, entry_of, queue_of, queues_of
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.open_tables import OpenTables
from routing_lib.read.warehouse import WarehouseSnapshot
from tests.support.helpers import seeds
from tests.support.writer_support import Change, WriterWarehouse
from tests.test_lookup_overlay import GROUPS, Model
from tests.test_lookup_snapshots import FLAGS, same_answers

REMOVES = {"delete", "update_preimage"}


def replayed(topics: RouteTopics, rows: list[dict]) -> dict[str, Entry | None]:
    """The changed topics' entries by applying each row in turn (a commit's removals
    first): what the vectorised build must give."""
    order = sorted(
        range(len(rows)),
        key=lambda i: (rows[i]["_commit_version"], rows[i]["_change_type"] not in REMOVES),
    )
    work: dict[str, dict] = {}
    for i in order:
        row = rows[i]
        queues = work.setdefault(row["topic"], queues_of(topics.raw(row["topic"])))
        if row["_change_type"] in REMOVES:
            queues.pop(row["broker_name"], None)
        else:
            queues[row["broker_name"]] = queue_of(*(row[c] for c in QUEUE_COLUMNS))
    entries = {t: entry_of(q) for t, q in work.items()}
    return {t: e for t, e in entries.items() if e != topics.raw(t)}


def change_row(rng: random.Random, topic: str, broker: str, kind: str, version: int) -> dict:
    return {
        "topic": topic,
        "broker_name": broker,
        "read_queue_nums": rng.choice([4, 8]),
        "write_queue_nums": 4,
        "perm": rng.choice([4, 6]),
        "topic_sys_flag": 0,
        "_change_type": kind,
        "_commit_version": version,
    }


def some_topics(rng: random.Random) -> RouteTopics:
    """A base of 60 topics on 4 groups, overlays of each kind, and a delta over it (changed,
    gone and new topics)."""
    rows = [
        base_row(g, f"T{t}", QueueData(4, 4, 6, 0))
        for g in GROUPS[:4]
        for t in rng.sample(range(60), 30)
    ]
    table = pa.Table.from_pylist(rows, schema=arrow_schema(TOPIC_QUEUE))
    overlays = {
        GROUPS[0]: Overlay(False),
        GROUPS[1]: Overlay(True, PermOp.WIPE, frozenset(f"T{t}" for t in range(0, 60, 3))),
    }
    topics = RouteTopics.of(BaseIndex.build(table, 0), overlays)
    q = queue_of(8, 8, 6, 0)
    return topics.changed(
        {"T1": (GROUPS[2], q, GROUPS[4], q), "T2": None, "New1": (GROUPS[4], q)}, {}
    )


@pytest.mark.parametrize("seed", seeds([1, 2, 3, 4, 5, 6]))
def test_changed_entries_are_the_rows_replayed_in_commit_order(seed):
    rng = random.Random(seed)
    topics = some_topics(rng)
    rows = []
    for version in range(3, 3 + rng.randint(1, 4)):
        for _ in range(rng.randint(1, 80)):
            topic = rng.choice([f"T{rng.randrange(64)}", "T1", "T2", "New1", "New2"])
            broker = rng.choice([*GROUPS, "broker-new"])
            if rng.random() < 0.3:  # an overwrite: its removal and insert in one commit
                rows.append(change_row(rng, topic, broker, "update_postimage", version))
                rows.append(change_row(rng, topic, broker, "update_preimage", version))
            else:
                kind = rng.choice(["insert", "delete", "update_postimage", "update_preimage"])
                rows.append(change_row(rng, topic, broker, kind, version))
    rng.shuffle(rows)  # the feed's order within a range is not the commit order
    table = pa.Table.from_pylist(rows)
    entries, ids = changed_entries(topics, table)
    assert entries == replayed(topics, rows)
    assert ids.tolist() == [topics.base.find(t) for t in entries]


def whole_group_batch(
    rng: random.Random, model: Model, step: int, group: str
) -> dict[str, list[Change]]:
    """Every base row of `group` changed (its perm 6 <-> 4), or its topics deleted, or a
    new run of topics added to it; now and then a fault of another group too."""
    kind = rng.choice(["perm", "perm", "delete", "add"])
    base: list[Change] = []
    if kind == "add":
        for t in range(rng.randint(20, 60)):
            queue = QueueData(4, 4, 6, 0)
            model.base[group, f"N{step}_{t}"] = queue
            base.append(("upsert", base_row(group, f"N{step}_{t}", queue)))
    for (g, topic), queue in list(model.base.items()):
        if g != group or kind == "add":
            continue
        if kind == "delete" and rng.random() < 0.7:
            del model.base[g, topic]
            base.append(("delete", {"topic": topic, "broker_name": g}))
        elif kind == "perm":
            read, write, perm, flag = queue
            queue = QueueData(read, write, 4 if perm == 6 else 6, flag)
            model.base[g, topic] = queue
            base.append(("upsert", base_row(g, topic, queue)))
    out: dict[str, list[Change]] = {TOPIC_BASE: base}
    if rng.random() < 0.5:
        other = rng.choice([g for g in GROUPS if g != group])
        overlay = rng.choice([Overlay(False), Overlay(True, PermOp.WIPE), Overlay()])
        model.overlays[other] = overlay
        out[TOPIC_OVERLAY] = [("upsert", overlay_row(other, overlay))]
    return out


@pytest.mark.parametrize("seed", seeds([1, 2, 3]))
def test_a_k_topic_base_change_equals_a_rebuild_from_scratch(tmp_path, seed):
    rng = random.Random(seed)
    flags = FLAGS[seed % 2]
    model = Model(rng, topics=400)
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, model.first_batch())
    tables = OpenTables(tmp_path)
    pinned = settled_versions(tmp_path, tables)[0]
    current = next_index(tmp_path, None, pinned, tables=tables, **flags).index
    risks, reference_risks = RouteRisks(), RouteRisks()
    risks.of(current)
    changed = 0
    for step in range(1, 9):
        group = rng.choice(GROUPS)
        wh.publish(step, 1_000 + step, whole_group_batch(rng, model, step, group))
        pinned = settled_versions(tmp_path, tables)[0]
        built = next_index(
            tmp_path, current, pinned, tables=tables, max_change_fraction=1.0, **flags
        )
        assert built.how == "incremental", built.reason
        changed += built.changed_topics
        # the counts the refresher computes off the event loop, carried from the last index
        carried = (built.index.route_count, dict(built.index.broker_topic_counts))
        fresh = load_index(tmp_path, pinned, **flags)
        assert carried == (fresh.route_count, dict(fresh.broker_topic_counts))
        same_answers(built.index, fresh)
        reference = RouteIndex(WarehouseSnapshot(model.tables(), pinned, 1_000 + step), **flags)
        same_answers(built.index, reference)
        risk, want = risks.of(built.index), reference_risks.of(reference)
        assert dict(risk.without_writable) == dict(want.without_writable)
        current = built.index
    assert changed > 400  # whole groups' topics changed, not a few


def test_find_many_finds_what_find_finds():
    """The vectorised binary search, over names that share prefixes, hold NUL bytes or
    non-ASCII characters, and keys longer than any name or of no length."""
    rng = random.Random(5)
    alphabet = ["a", "b", "\x00", "é", "zz", "Topic", "_", "日"]
    names = sorted(
        {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(2000)}
    )
    rows = [base_row(GROUPS[0], name, QueueData(4, 4, 6, 0)) for name in names]
    base = BaseIndex.build(pa.Table.from_pylist(rows, schema=arrow_schema(TOPIC_QUEUE)), 0)
    keys = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(3000)]
    keys += names[::5] + ["a" * 300]
    found = base.find_many(keys)
    assert found.tolist() == [base.find(key) for key in keys]
    assert (found >= 0).sum() > len(names) // 5
    with_surrogate = [*names[:100], "\ud800"]  # a lone surrogate: no stored name has one
    assert base.find_many(with_surrogate).tolist() == [*range(100), -1]
