"""The fault path's shortcuts give what the full computation gives.

A fault of a large broker group (expiry, return, role switch, topic change) used to cost a
Python loop over every topic at each step. The shortcuts: the topic_queue_table diff and the
topic_route_history changes computed with set operations on the tables (names only for a
group's removal), a registration applied by building rows only for the configs that differ,
and "applying this content changes nothing" decided by reference (the table remembers the
registration it was built from; the step remembers it by the table's content reference).
Each is checked here against the general computation it replaces, row for row and in order.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from routing_lib.core.catalog import (
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
)
from routing_lib.core.columnar import bundle_rows
from routing_lib.core.fact_rows import overlay_of_row, queue_of_row
from routing_lib.core.group_facts import topic_queue_rows
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.core.history import _changed, _topic_route_changes
from routing_lib.core.overlay import Overlay
from routing_lib.core.rows import StepRow
from routing_lib.core.step import (
    BatchContext,
    HeldContent,
    InputRow,
    SavedGroup,
    StepConfig,
    step_group,
)
from routing_lib.core.tables import TOPIC_QUEUE, _diff_maps, _diff_topics, _topic_row
from routing_lib.core.topic_table import EMPTY_TOPICS, QueueData, TopicTable
from routing_lib.core.wire import externalize, pack_event
from schemas import parse_event
from tests.support.helpers import seeds

NAME = "broker-a"
T0 = 1_764_000_000_000
DELAY_MS = 10_000
NO_CONTENT_REFS = 1 << 62  # a min_chars no value reaches: every value stays inline


# ---- the diffs, against the general map comparisons ------------------------------------------


def _random_rows(rng: random.Random, names: list[str]) -> dict[str, QueueData]:
    return {
        n: QueueData(rng.choice([1, 8]), rng.choice([1, 8]), rng.choice([2, 4, 6]), 0)
        for n in names
    }


def _table_pair(rng: random.Random) -> tuple[TopicTable, TopicTable]:
    pool = [f"t{i}" for i in range(rng.randint(0, 40))]
    before = _random_rows(rng, rng.sample(pool, rng.randint(0, len(pool))))
    shape = rng.choice(["removal", "first", "change", "same", "reorder"])
    if shape == "removal":
        after: dict[str, QueueData] = {}
    elif shape == "first":
        before, after = {}, before
    elif shape == "same":
        after = dict(before)
    elif shape == "reorder":
        after = dict(reversed(list(before.items())))
    else:
        after = {n: q for n, q in before.items() if rng.random() > 0.2}
        for n in rng.sample(pool, min(len(pool), 5)):
            after[n] = _random_rows(rng, [n])[n]
    tables = []
    for rows in (before, after):
        table = TopicTable(rows) if rows else EMPTY_TOPICS
        if rows and rng.random() < 0.5:  # as read from state: a blob, rows not decoded yet
            table = TopicTable.from_blob(table.blob())
        tables.append(table)
    return tables[0], tables[1]


@pytest.mark.parametrize("seed", seeds(200))
def test_topic_diff_equals_the_keyed_map_diff(seed):
    """Same changes in the same order (deletes in the order of a set of keys, as before)."""
    rng = random.Random(seed)
    before, after = _table_pair(rng)
    general = _diff_maps(
        TOPIC_QUEUE,
        {(t, NAME): q for t, q in before.items()},
        {(t, NAME): q for t, q in after.items()},
        lambda k, q: _topic_row(NAME, k[0], q),
    )
    assert _diff_topics(NAME, before, after) == general


@pytest.mark.parametrize("seed", seeds(200))
def test_topic_route_changes_equal_the_map_comparison(seed):
    rng = random.Random(seed)
    before, after = _table_pair(rng)
    assert _topic_route_changes(before, after) == _changed(dict(before.items()), dict(after))


def test_a_removal_reads_no_rows():
    table = TopicTable.from_blob(TopicTable(_random_rows(random.Random(1), ["a", "b"])).blob())
    decodes = TopicTable.decodes
    assert [c.key for c in _diff_topics(NAME, table, EMPTY_TOPICS)] in (
        [("a", NAME), ("b", NAME)],
        [("b", NAME), ("a", NAME)],
    )
    assert _topic_route_changes(table, EMPTY_TOPICS) == (["a", "b"], [])
    assert TopicTable.decodes == decodes


# ---- a group's history through the step: by reference == inline -----------------------------


def _register(
    at: int, addr: str, broker_id: int, version: int, topics: dict[str, Any], acting: bool = False
) -> dict:
    return {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "C1",
        "brokerAddr": addr,
        "brokerName": NAME,
        "brokerId": broker_id,
        "haServerAddr": addr,
        "enableActingMaster": acting,
        "dataVersion": {"stateVersion": 0, "timestamp": version, "counter": version},
        "topicConfigTable": topics,
    }


def _config(name: str, queues: int, perm: int) -> dict[str, Any]:
    return {
        "topicName": name,
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": perm,
        "topicSysFlag": 0,
    }


def _group_history(rng: random.Random) -> list[dict]:
    """A master and a slave registering every 30 s; either crashes (and expires) or restarts
    and comes back with the same table, the topics change (added, dropped, perm or queue
    changes; usually with a new dataVersion), the two swap ids (role switch)."""
    topics = {f"topic-{i}": _config(f"topic-{i}", 8, 6) for i in range(rng.randint(3, 30))}
    acting = rng.random() < 0.5  # a slave alone wipes the write permission
    version = 1
    nodes = {"10.0.0.1:10911": 0, "10.0.0.2:10911": 1}
    down: dict[str, int] = {}  # addr -> back at
    events = []
    at = T0
    for _ in range(rng.randint(8, 30)):
        at += 30_000
        fault = rng.random()
        if fault < 0.25 and not down:
            addr = rng.choice(list(nodes))
            down[addr] = at + rng.choice([20_000, 200_000, 400_000])  # after expiry, or before
        elif fault < 0.5:
            # a new dataVersion; or now and then none: RocketMQ then applies only the topics
            # the group lacks (a partial application) and ignores the changed rows
            version += rng.random() < 0.8
            topics = dict(topics)
            for _ in range(rng.randint(1, 3)):
                name = rng.choice(list(topics))
                kind = rng.choice(["add", "drop", "perm", "queues"])
                if kind == "add":
                    new = f"topic-{rng.randint(100, 999)}"
                    topics[new] = _config(new, 4, 6)
                elif kind == "drop" and len(topics) > 1:
                    del topics[name]
                elif kind == "perm":
                    topics[name] = _config(name, topics[name]["readQueueNums"], 4)
                else:
                    topics[name] = _config(name, 16, topics[name]["perm"])
        elif fault < 0.55:  # role switch: the slave registers as master, the master as slave
            nodes = {addr: 1 - broker_id for addr, broker_id in nodes.items()}
            version += 1
        for addr, broker_id in sorted(nodes.items()):
            if addr in down:
                if at < down[addr]:
                    continue
                del down[addr]
            jitter = rng.randint(0, 500)
            events.append(_register(at + jitter, addr, broker_id, version, topics, acting))
    return events


def _run(
    records: list[dict], by_reference: bool, rng: random.Random, config: StepConfig
) -> list[StepRow]:
    """The group's step over the history in random micro-batches, as the job runs it."""
    events = [parse_event(json.dumps(r)) for r in records]
    min_chars = 0 if by_reference else NO_CONTENT_REFS
    payloads = [externalize(pack_event(e), None, min_chars) for e in events]
    inputs = [
        InputRow(e.eventTime, ("file", n), p)
        for n, (e, p) in enumerate(zip(events, payloads, strict=True))
    ]
    saved: SavedGroup | None = None
    out: list[StepRow] = []
    published, i = 0, 0
    last = max(e.eventTime for e in events)
    while published < last:
        size = rng.randint(1, 6)
        rows = inputs[i : i + size]
        i += size
        seen = max((r.event_time for r in rows), default=last + DELAY_MS)
        watermark = max(published, seen - DELAY_MS) if i < len(events) else last + 200_000
        result = step_group(
            NAME,
            saved,
            rows,
            BatchContext(watermark, published),
            config,
            (),
            HeldContent(None, min_chars),
        )
        out += result.rows
        saved, published = result.state, watermark
    return out


@pytest.mark.parametrize("seed", seeds(60))
def test_faults_by_reference_give_the_rows_of_the_inline_run(seed):
    """By reference the shortcuts apply (the same content applied again is known to change
    nothing); inline none of them can (no reference). Every output row, table and history,
    byte for byte and in order, must be the same: in the per-topic layout's rows; in the
    group layout (the job's) every other row, and the topic_queue_table derived from its
    topic_base / topic_overlay rows (the facts may differ: a return by reference keeps the
    base under a new overlay where the inline run folds it into a new base)."""
    records = _group_history(random.Random(seed))
    per_topic = StepConfig(DEFAULT_FLAGS, group_facts=False)
    inline = _run(records, by_reference=False, rng=random.Random(seed + 1), config=per_topic)
    by_reference = _run(records, by_reference=True, rng=random.Random(seed + 1), config=per_topic)
    assert [tuple(r) for r in by_reference] == [tuple(r) for r in inline]
    layout = StepConfig(DEFAULT_FLAGS)
    inline = _run(records, by_reference=False, rng=random.Random(seed + 1), config=layout)
    by_reference = _run(records, by_reference=True, rng=random.Random(seed + 1), config=layout)
    assert _other_rows(by_reference) == _other_rows(inline)
    assert _derived_topic_queue(by_reference) == _derived_topic_queue(inline)


_LAYOUT_TABLES = (TOPIC_BASE, TOPIC_OVERLAY, TOPIC_BASE_CHANGES, TOPIC_OVERLAY_CHANGES)


def _other_rows(rows: list[StepRow]) -> list[tuple]:
    """The rows outside the group layout's tables (the stats rows name which tables the
    step wrote, and count its changes: left out too)."""
    return [tuple(r) for r in rows if r.table not in _LAYOUT_TABLES and r.kind != "stats"]


def _derived_topic_queue(rows: list[StepRow]) -> dict:
    """topic_queue_table as the writer derives it from the topic_base / topic_overlay rows."""
    base: dict[tuple[str, str], QueueData] = {}
    overlays: dict[str, Overlay] = {}
    for r in rows:
        if r.kind != "change" or r.table not in (TOPIC_BASE, TOPIC_OVERLAY):
            continue
        for row in bundle_rows(r.table, r.row_json):
            if r.table == TOPIC_OVERLAY:
                if r.op == "delete":
                    overlays.pop(row["broker_name"], None)
                else:
                    overlays[row["broker_name"]] = overlay_of_row(row)
            elif r.op == "delete":
                base.pop((row["broker_name"], row["topic"]), None)
            else:
                base[row["broker_name"], row["topic"]] = queue_of_row(row)
    return topic_queue_rows(base, overlays)


def test_a_return_with_the_same_topics_decodes_nothing():
    """The master crashes and expires while the slave keeps the group; it returns with the
    same table: the step decides by reference that the application changes nothing."""
    topics = {f"topic-{i:04d}": _config(f"topic-{i:04d}", 8, 6) for i in range(2000)}
    master, slave = "10.0.0.1:10911", "10.0.0.2:10911"
    records = [_register(T0, master, 0, 1, topics), _register(T0 + 1, slave, 1, 1, topics)]
    for n in range(1, 11):  # the slave goes on registering; the master is gone for 300 s
        records.append(_register(T0 + n * 30_000, slave, 1, 1, topics))
    back = T0 + 330_001
    records.append(_register(back, master, 0, 1, topics))
    events = [parse_event(json.dumps(r)) for r in records]
    payloads = [externalize(pack_event(e), None, 0) for e in events]
    rows = [
        InputRow(e.eventTime, ("file", n), p)
        for n, (e, p) in enumerate(zip(events, payloads, strict=True))
    ]
    config, content = StepConfig(DEFAULT_FLAGS), HeldContent(None, 0)
    first = step_group(NAME, None, rows[:2], BatchContext(T0 + 1, 0), config, (), content)
    saved = step_group(
        NAME, first.state, rows[2:-1], BatchContext(back - 1, T0 + 1), config, (), content
    )
    assert saved.state is not None
    # the master expired: its row left broker_addr_table, the topics stayed (the slave's)
    assert any(r.table == "broker_addr_table" and r.op == "delete" for r in saved.rows)
    assert not any(r.table in (TOPIC_QUEUE, TOPIC_BASE) for r in saved.rows if r.op == "delete")

    decodes = TopicTable.decodes
    returned = step_group(
        NAME, saved.state, rows[-1:], BatchContext(back, back - 1), config, (), content
    )
    assert TopicTable.decodes == decodes  # the group's table was not decoded
    assert not any(r.table in (TOPIC_QUEUE, TOPIC_BASE) for r in returned.rows)
    assert any(r.table == "broker_addr_table" and r.op == "upsert" for r in returned.rows)
