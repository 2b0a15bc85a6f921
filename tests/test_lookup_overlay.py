"""The lookup serves topicQueueTable from topic_base + topic_overlay (issue 36): the overlay
rows decide at read time which holders are present and with which perm, as RocketMQ's
pickupTopicRouteData filters its maps. Over random batches of base changes and faults the
incremental index equals a full load and the reference (topic_queue_rows of core); a fault
of a large group is one overlay row: no base entry is rebuilt, the other groups' topics and
rendered routes stay. Tables written with delta-rs from core rows (fact_rows.base_row /
overlay_row) by the job's MERGE (tests/support/writer_support.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from routing_lib.console.fleet import WriteCounts
from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY
from routing_lib.core.fact_rows import base_row, overlay_row
from routing_lib.core.group_facts import topic_queue_rows
from routing_lib.core.overlay import Overlay, PermOp
from routing_lib.core.tables import BROKER_ADDR, BROKER_LIVE, CLUSTER_ADDR, TOPIC_QUEUE, Row
from routing_lib.core.topic_table import QueueData
from routing_lib.lookup import base_build, route_risk
from routing_lib.lookup.base_index import BaseIndex
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.route_risk import RouteRisks
from routing_lib.lookup.route_topics import RouteTopics
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.shared_index import SharedIndexes
from routing_lib.lookup.snapshots import load_index, next_index
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.open_tables import OpenTables
from routing_lib.read.warehouse import WarehouseSnapshot
from tests.support.helpers import seeds
from tests.support.lookup_support import addr, live
from tests.support.writer_support import Change, WriterWarehouse
from tests.test_lookup_snapshots import FLAGS, same_answers

GROUPS = [f"broker-{g}" for g in range(5)]


class Model:
    """topic_base and topic_overlay as the job would hold them, and the broker tables."""

    def __init__(self, rng: random.Random, topics: int = 30) -> None:
        self.base: dict[tuple[str, str], QueueData] = {}
        self.overlays: dict[str, Overlay] = {}
        for group in GROUPS[:-1]:  # the last group: no base row at the first load (a
            # group only the delta holds: its faults are applied at read time alone)
            for t in rng.sample(range(topics), topics // 2):
                self.base[group, f"T{t}"] = QueueData(4, 4, 6, rng.choice([0, 1, 3]))
        self.brokers: dict[str, list[Row]] = {
            BROKER_ADDR: [
                addr(group, 0, f"127.0.0.{g + 1}:10911", f"c{g % 2}", acting=True)
                for g, group in enumerate(GROUPS)
            ],
            CLUSTER_ADDR: [
                {"cluster_name": f"c{g % 2}", "broker_name": group}
                for g, group in enumerate(GROUPS)
            ],
            BROKER_LIVE: [
                live(f"c{g % 2}", f"127.0.0.{g + 1}:10911", group) for g, group in enumerate(GROUPS)
            ],
        }

    def tables(self) -> dict[str, list[Row]]:
        """The route tables a NameServer would hold: topicQueueTable derived by core."""
        return {
            **self.brokers,
            TOPIC_QUEUE: list(topic_queue_rows(self.base, self.overlays).values()),
        }

    def first_batch(self) -> dict[str, list[Change]]:
        base = [("upsert", base_row(g, t, q)) for (g, t), q in self.base.items()]
        return {
            TOPIC_BASE: base,
            **{t: [("upsert", r) for r in rs] for t, rs in self.brokers.items()},
        }


def random_batch(rng: random.Random, model: Model, step: int) -> dict[str, list[Change]]:
    """Base rows changed and groups faulted, as the writer commits them: one change per key."""
    base: dict[tuple[str, str], Change] = {}
    overlays: dict[str, Change] = {}
    for _ in range(rng.randint(0, 4)):  # topic changes: O(changed) base rows
        group, topic = rng.choice(GROUPS), f"T{rng.randrange(36)}"
        if (group, topic) in model.base and rng.random() < 0.4:
            del model.base[group, topic]
            base[group, topic] = ("delete", {"topic": topic, "broker_name": group})
        else:
            queue = QueueData(rng.choice([2, 4, 8]), 4, rng.choice([2, 4, 6]), 0)
            model.base[group, topic] = queue
            base[group, topic] = ("upsert", base_row(group, topic, queue))
    for _ in range(rng.randint(0, 3)):  # faults: one overlay row each
        group = rng.choice(GROUPS)
        kind = rng.choice(["expire", "return", "wipe", "add", "split", "gone", "trivial"])
        old = model.overlays.get(group, Overlay())
        if kind == "gone":
            model.overlays.pop(group, None)
            overlays[group] = ("delete", {"broker_name": group})
            continue
        if kind == "expire":
            new = Overlay(False, old.perm_op, old.covered)
        elif kind == "return":
            new = Overlay(True, rng.choice([PermOp.ID, PermOp.WIPE]), None)
        elif kind == "wipe":
            new = Overlay(old.present, PermOp.WIPE.then(old.perm_op), old.covered)
        elif kind == "add":
            new = Overlay(old.present, rng.choice([PermOp.RW, PermOp.R]), old.covered)
        elif kind == "split":  # a split registration's chunks so far (some not in the base)
            chosen = {f"T{t}" for t in rng.sample(range(40), rng.randint(0, 12))}
            new = Overlay(True, old.perm_op, frozenset(chosen))
        else:
            new = Overlay()
        model.overlays[group] = new
        overlays[group] = ("upsert", overlay_row(group, new))
    beat = [("upsert", {**r, "last_update_timestamp": step}) for r in model.brokers[BROKER_LIVE]]
    model.brokers[BROKER_LIVE] = [row for _, row in beat]
    out = {BROKER_LIVE: beat}
    if base:
        out[TOPIC_BASE] = list(base.values())
    if overlays:
        out[TOPIC_OVERLAY] = list(overlays.values())
    return out


@pytest.mark.parametrize("seed", seeds([1, 2, 3, 4]))
def test_overlays_applied_at_read_time_equal_the_derived_table(tmp_path, seed):
    rng = random.Random(seed)
    flags = FLAGS[seed % 2]
    model = Model(rng)
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, model.first_batch())
    shared = SharedIndexes.create()
    tables = OpenTables(tmp_path)  # kept open from build to build, as the refresher does
    try:
        pinned = settled_versions(tmp_path, tables)[0]
        current = next_index(tmp_path, None, pinned, shared=shared, tables=tables, **flags).index
        flips = 0
        risks, reference_risks = RouteRisks(), RouteRisks()
        risks.of(current)
        write_counts = WriteCounts()
        write_counts.of(current.store)
        reference_risks.of(RouteIndex(WarehouseSnapshot(model.tables(), pinned, 1_000), **flags))
        for step in range(1, 16):
            wh.publish(step, 1_000 + step, random_batch(rng, model, step))
            pinned, latest = settled_versions(tmp_path, tables)
            assert pinned == latest == settled_versions(tmp_path)[1]  # as the tables opened
            built = next_index(tmp_path, current, pinned, shared=shared, tables=tables, **flags)
            assert built.how == "incremental", built.reason
            flips += built.changed_groups
            reference = RouteIndex(WarehouseSnapshot(model.tables(), pinned, 1_000 + step), **flags)
            same_answers(built.index, reference)
            same_answers(built.index, load_index(tmp_path, pinned, **flags))
            # the route risks, vectorised over the base's holders, as over the derived rows
            risk, want = risks.of(built.index), reference_risks.of(reference)
            assert dict(risk.without_writable) == dict(want.without_writable)
            assert dict(risk.single_group) == dict(want.single_group)
            # the console's per-group counts, vectorised likewise (and carried: WriteCounts
            # takes the base part over from the last store's when only the delta grew)
            want_counts = reference.store.group_write_counts()
            assert built.index.store.group_write_counts() == want_counts
            assert write_counts.of(built.index.store) == want_counts
            current = built.index
        assert flips > 5  # the faults were applied as overlay flips
    finally:
        shared.remove()


def big_fleet(groups: int, topics: int) -> Model:
    model = Model(random.Random(0), topics=0)
    model.base = {
        (group, f"T{g}_{t}" if t % 10 else f"Shared{t}"): QueueData(8, 8, 6, 0)
        for g, group in enumerate(GROUPS[:groups])
        for t in range(topics)
    }
    return model


def test_an_expiry_is_one_overlay_row_and_touches_no_other_group(tmp_path):
    model = big_fleet(3, 2_000)
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, model.first_batch())
    first = next_index(tmp_path, None, settled_versions(tmp_path)[0]).index
    first.topics, first.route_count, first.broker_topic_counts  # noqa: B018  computed once
    kept = {t: first.route_body(t).standard for t in ("T0_1", "T2_1", "Shared0")}
    # broker-1 expires: its overlay row only (its base stays, as the job writes it)
    wh.publish(1, 2_000, {TOPIC_OVERLAY: [("upsert", overlay_row("broker-1", Overlay(False)))]})
    built = next_index(tmp_path, first, settled_versions(tmp_path)[0])
    assert (built.how, built.changed_rows, built.changed_groups) == ("incremental", 0, 1)
    after = built.index
    assert after.store.base is first.store.base and len(after.store.delta) == 0
    assert after.route_body("T1_1") is None  # only broker-1 held it: TOPIC_NOT_EXIST
    assert "T1_1" not in after.topics and "T0_1" in after.topics
    assert len(after.topics) == len(first.topics) - 1_800
    assert {t: after.route_body(t).standard for t in ("T0_1", "T2_1")} == {
        t: kept[t] for t in ("T0_1", "T2_1")
    }
    shared = json.loads(after.route_body("Shared0").standard)["queueDatas"]
    assert [q["brokerName"] for q in shared] == ["broker-0", "broker-2"]
    assert dict(after.broker_topic_counts) == {"broker-0": 2_000, "broker-2": 2_000}
    # an admin WIPE_WRITE_PERM of broker-0: one row, every one of its queues read-only
    wh.publish(
        2, 3_000, {TOPIC_OVERLAY: [("upsert", overlay_row("broker-0", Overlay(True, PermOp.WIPE)))]}
    )
    wiped = next_index(tmp_path, after, settled_versions(tmp_path)[0]).index
    assert json.loads(wiped.route_body("T0_7").standard)["queueDatas"][0]["perm"] == 4
    assert json.loads(wiped.route_body("T2_7").standard)["queueDatas"][0]["perm"] == 6
    # broker-1 returns with the table it left with: the same row flipped back
    wh.publish(3, 4_000, {TOPIC_OVERLAY: [("upsert", overlay_row("broker-1", Overlay()))]})
    back = next_index(tmp_path, wiped, settled_versions(tmp_path)[0])
    assert back.changed_rows == 0 and back.index.store.base is first.store.base
    assert back.index.route_body("T1_1") is not None
    assert len(back.index.topics) == len(first.topics)
    same_answers(back.index, load_index(tmp_path, settled_versions(tmp_path)[0]))


def test_processes_share_the_newest_base_index_file(tmp_path):
    """Two processes of a service (two chains of snapshots over one SharedIndexes): one
    base index file, written by the first; a process that loads later maps it and applies
    the change feed; a new file (one process's delta grew large) is taken up by the other
    at its next build, and old files are unlinked but the newest two."""
    rng = random.Random(3)
    model = Model(rng)
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, model.first_batch())
    shared = SharedIndexes.create()
    try:
        one = next_index(tmp_path, None, settled_versions(tmp_path)[0], shared=shared).index
        table_id = one.store.base.table_id
        assert shared.versions(table_id) == [one.store.base.version]
        queue = QueueData(8, 8, 6, 0)  # a base change after the first process's file
        model.base["broker-0", "T99"] = queue
        wh.publish(1, 2_000, {TOPIC_BASE: [("upsert", base_row("broker-0", "T99", queue))]})
        pinned = settled_versions(tmp_path)[0]
        two = next_index(tmp_path, None, pinned, shared=shared).index  # a worker starting now
        assert two.store.base.version == one.store.base.version < pinned[TOPIC_BASE]
        assert shared.versions(table_id) == [one.store.base.version]  # no second file
        same_answers(two, load_index(tmp_path, pinned))
        for step in range(2, 6):
            wh.publish(step, 1_000 * step, random_batch(rng, model, step))
            pinned = settled_versions(tmp_path)[0]
            # the first process rebuilds at every change (a tiny limit), the second follows
            one = next_index(
                tmp_path, one, pinned, shared=shared, max_change_fraction=0, min_full_rows=0
            ).index
            two = next_index(tmp_path, two, pinned, shared=shared).index
            assert two.store.base.version == one.store.base.version
            same_answers(two, load_index(tmp_path, pinned))
        assert len(shared.versions(table_id)) <= 2
    finally:
        shared.remove()


def test_processes_map_one_file_of_each_snapshots_present_and_counts(tmp_path):
    """The per-holder present flags and per-topic counts of a snapshot are one file of the
    service that every process maps (named by the base index file and topic_overlay's
    version): two chains of snapshots with faults in most batches, one loading later, end
    on the same files, read-only, equal to arrays computed afresh; old files are unlinked."""
    rng = random.Random(11)
    model = Model(rng)
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, model.first_batch())
    shared = SharedIndexes.create()
    try:
        one = next_index(tmp_path, None, settled_versions(tmp_path)[0], shared=shared).index
        two = None
        for step in range(1, 12):
            wh.publish(step, 1_000 * step, random_batch(rng, model, step))
            pinned = settled_versions(tmp_path)[0]
            one = next_index(tmp_path, one, pinned, shared=shared).index
            two = next_index(tmp_path, two, pinned, shared=shared).index
            for index in (one, two):
                store = index.store
                fresh = RouteTopics.of(store.base, store.overlays)
                assert store.arrays_key is not None
                assert not store.present.flags.writeable and not store.counts.flags.writeable
                assert (store.present == fresh.present).all()
                assert (store.counts == fresh.counts).all()
            assert one.store.arrays_key == two.store.arrays_key
            same_answers(two, load_index(tmp_path, pinned))
        files = [p for p in shared.directory.iterdir() if p.name.startswith("arrays-")]
        assert 1 <= len(files) <= shared.keep_arrays
    finally:
        shared.remove()


def test_a_large_base_index_is_built_by_a_process_of_its_own(tmp_path, monkeypatch):
    """Past SUBPROCESS_ROWS the file is written by `python -m routing_lib.lookup.base_build`
    (its transient memory leaves with that process); the index is the same."""
    model = big_fleet(2, 300)
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, model.first_batch())
    pinned = settled_versions(tmp_path)[0]
    shared = SharedIndexes.create()
    try:
        monkeypatch.setattr(base_build, "SUBPROCESS_ROWS", 100)
        monkeypatch.setattr(base_build, "write", None)  # not in this process
        index = next_index(tmp_path, None, pinned, shared=shared).index
        assert shared.versions(index.store.base.table_id) == [pinned[TOPIC_BASE]]
        same_answers(index, load_index(tmp_path, pinned))
    finally:
        shared.remove()


def test_route_count_by_groups_with_and_without_every_present_group():
    """count_with_group_in: the topics with a present holder in the given groups, whether
    every group holding a present topic is among them (the count of visible topics, the
    usual case) or not (counted holder by holder), delta topics included."""
    # g0: T0 T1 T2; g1: T1 T2 T3; g2: T3 T4 (T1-T3 on two groups)
    pairs = [("T0", "g0"), ("T1", "g0"), ("T2", "g0"), ("T1", "g1"), ("T2", "g1")]
    pairs += [("T3", "g1"), ("T3", "g2"), ("T4", "g2")]
    table = pa.table(
        {
            "topic": [t for t, _ in pairs],
            "broker_name": [g for _, g in pairs],
            **{c: [8] * len(pairs) for c in ("read_queue_nums", "write_queue_nums")},
            "perm": [6] * len(pairs),
            "topic_sys_flag": [0] * len(pairs),
        }
    )
    base = BaseIndex.build(table, 1)
    q = (8, 8, 6, 0)
    cases = [
        ({}, {"g0", "g1", "g2"}, 5),
        ({"g2": Overlay(present=False)}, {"g0", "g1"}, 4),  # g2 absent and not asked
        ({}, {"g0", "g1"}, 4),  # g2 present but not asked: T4 not counted
        ({"g1": Overlay(covered=frozenset({"T3"}))}, {"g1"}, 1),
        ({"g0": Overlay(present=False)}, {"g1", "g2"}, 4),
    ]
    for overlays, groups, expected in cases:
        topics = RouteTopics.of(base, overlays)
        assert topics.count_with_group_in(groups) == expected, (overlays, groups)
        # a topic the delta holds (T9 on g0 and g2; T0 gone) counts by its present holders
        changed = topics.changed({"T9": ("g0", q, "g2", q), "T0": None}, {})
        want = (
            expected
            - ("g0" in groups and "g0" not in overlays)
            + any(g in groups and overlays.get(g, Overlay()).present for g in ("g0", "g2"))
        )
        assert changed.count_with_group_in(groups) == want, (overlays, groups)


def test_a_mapped_base_index_is_resident_from_the_start(tmp_path):
    """Mapping a base index file maps every page of it into the process at once (its pages
    are in memory anyway): the process's RSS counts the index from the first snapshot, it
    does not grow as requests touch topics."""
    pairs = [(f"T{i:06d}", f"g{i % 7}") for i in range(60_000)]
    table = pa.table(
        {
            "topic": [t for t, _ in pairs],
            "broker_name": [g for _, g in pairs],
            **{c: [8] * len(pairs) for c in ("read_queue_nums", "write_queue_nums")},
            "perm": [6] * len(pairs),
            "topic_sys_flag": [0] * len(pairs),
        }
    )
    path = tmp_path / "base.arrow"
    BaseIndex.build(table, 1).save(path)
    index = BaseIndex.mapped(path, 1)
    resident = 0
    mapping = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            mapping = fields[5] if len(fields) > 5 else None
        elif fields[0] == "Rss:" and mapping == str(path):
            resident += int(fields[1]) * 1024
    assert resident >= path.stat().st_size - 4096, (resident, path.stat().st_size)
    assert index.find("T000042") == 42


@pytest.mark.parametrize("groups", [3, 40_000])
def test_per_topic_counts_hold_a_holder_per_group_however_many_groups(groups):
    """The counts are int16 while every count fits (a topic has one holder per group at
    most), int32 beyond: a topic on 40 000 groups, all then some of them gone."""
    rows = [
        {
            "topic": "T",
            "broker_name": f"g{i:05d}",
            "read_queue_nums": 4,
            "write_queue_nums": 4,
            "perm": 6,
            "topic_sys_flag": 0,
        }
        for i in range(groups)
    ] + [
        {
            "topic": "U",
            "broker_name": "g00000",
            "read_queue_nums": 4,
            "write_queue_nums": 4,
            "perm": 6,
            "topic_sys_flag": 0,
        }
    ]
    base = BaseIndex.build(pa.Table.from_pylist(rows, schema=arrow_schema(TOPIC_QUEUE)), 0)
    topics = RouteTopics.of(base)
    assert int(topics.counts[base.find("T")]) == groups
    gone = {f"g{i:05d}": Overlay(present=False) for i in range(1, groups)}
    after = topics.changed({}, gone)
    assert int(after.counts[base.find("T")]) == 1 and after.get("U") is not None
    assert int(topics.counts[base.find("T")]) == groups  # the served one unchanged


def test_route_risks_carried_over_topic_changes_equal_a_fresh_count(tmp_path, monkeypatch):
    """RouteRisks counts the base's topics over its holders once per flip or broker change;
    between them (a batch that changes a few topics) it carries the last count, less the
    topics that moved to the delta. A group's topics lost with it are looked up by id."""
    counted = []
    monkeypatch.setattr(route_risk, "_base_risks", _counting(route_risk._base_risks, counted))
    model = big_fleet(3, 2_000)  # broker-0..2; T{g}_{t} on one group, Shared{t} on all three
    wh = WriterWarehouse(tmp_path)
    wh.publish(0, 1_000, model.first_batch())
    tables = OpenTables(tmp_path)
    index = next_index(tmp_path, None, settled_versions(tmp_path, tables)[0], tables=tables).index
    risks = RouteRisks()
    risks.of(index)
    counts: list[int] = []

    def step(batch: int, changes: dict[str, list[Change]]) -> RouteIndex:
        wh.publish(batch, 1_000 + batch, changes)
        pinned = settled_versions(tmp_path, tables)[0]
        built = next_index(tmp_path, index, pinned, tables=tables).index
        fresh = RouteRisks().of(built)
        counted.clear()
        risk = risks.of(built)
        counts.append(len(counted))  # 0: carried from the last risk
        assert dict(risk.single_group) == dict(fresh.single_group)
        assert risk.single_group.sizes == fresh.single_group.sizes  # each topic counted once
        # besides what a fresh count sees, only the topics lost with a group
        lost = set(risk.topics_without_writable()) - set(fresh.topics_without_writable())
        assert lost == {t for t in lost if t.startswith("T1_")}
        return built

    wiped = QueueData(8, 8, 4, 0)  # read-only: no writable queue
    for batch, topic in enumerate(("T0_5", "Shared30", "T2_9"), start=1):
        group = "broker-2" if topic == "T2_9" else "broker-0"
        index = step(batch, {TOPIC_BASE: [("upsert", base_row(group, topic, wiped))]})
    assert counts == [0, 0, 0]  # carried over topic changes
    assert risks.of(index).without_writable["c0"] == ("T0_5", "T2_9")
    # broker-1 expires (its overlay row and its broker rows): its 1 800 own topics are lost
    rows = {t: [r for r in rs if r["broker_name"] == "broker-1"] for t, rs in model.brokers.items()}
    gone = {t: [("delete", r) for r in rs] for t, rs in rows.items()}
    index = step(4, {**gone, TOPIC_OVERLAY: [("upsert", overlay_row("broker-1", Overlay(False)))]})
    assert counts[-1] == 1  # a flip: counted again
    assert len(risks.of(index).without_writable["c1"]) == 1_800
    index = step(5, {TOPIC_BASE: [("upsert", base_row("broker-0", "T0_6", wiped))]})
    assert counts[-1] == 0 and len(risks.of(index).topics_without_writable()) == 1_803
    # back: every lost topic is routed again
    back = {t: [("upsert", r) for r in rs] for t, rs in rows.items()}
    index = step(6, {**back, TOPIC_OVERLAY: [("upsert", overlay_row("broker-1", Overlay()))]})
    assert risks.of(index).topics_without_writable() == ["T0_5", "T0_6", "T2_9"]


def _counting(function, calls: list):
    def counted(*args, **kwargs):
        calls.append(1)
        return function(*args, **kwargs)

    return counted
