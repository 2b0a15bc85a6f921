"""Analyst recipes (routing_lib.history_recipes): Spark SQL == pandas == the pure core.

One real backfill per module, over two fixtures at once (a random fleet, and an acting-master
group whose queues lose the write perm; their broker groups and addresses are disjoint, so
the combined history is the union of both). The independent answer comes from a sweep of the
core state machine over every instant at which State(T) can change (each eventTime, each
heartbeat deadline + 1), checked against replay_dump at sampled times.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from chispa import assert_df_equality

from routing_lib import history_recipes as hr
from routing_lib.cli import main
from routing_lib.core.dump import canonical_dump
from routing_lib.core.group_routes import DEFAULT_FLAGS, PERM_WRITE, GroupRoutes, apply_event
from routing_lib.core.history import BROKER_LIVENESS_EVENTS, EXPIRED
from routing_lib.core.replay import default_watermark, fleet_rows, replay_dump
from routing_lib.read.history import load_history
from schemas import parse_event
from tests.support.helpers import DELAY_MS, GOLDEN, fixture_lines

pytestmark = pytest.mark.spark

FIXTURES = ("20_random_fleet_seed202", "11_acting_master_perm_wipe")
TOPIC = "TBW102"  # served by every group of both fixtures


@dataclass
class Facts:
    """What the core says, instant by instant (state changes only at these instants)."""

    instants: list[int] = field(default_factory=list)
    # broker_name -> [start, end) intervals in brokerAddrTable without id 0 (end None: open)
    masterless: dict[str, list[list[Any]]] = field(default_factory=dict)
    # (topic, broker_name, lost_at, previous_perm, perm, previous_valid_to)
    perm_lost: list[tuple] = field(default_factory=list)
    expiries: Counter = field(default_factory=Counter)  # (cluster, name, addr, day) -> count
    cluster_sizes: list[tuple[str, int, int]] = field(default_factory=list)
    # sampled instant -> {topic: {broker_name: (read, write, perm, sysflag, cluster, master)}}
    routes: dict[int, dict[str, dict[str, tuple]]] = field(default_factory=dict)
    checked_against_replay: int = 0


def _instants(events: list, until: int) -> Iterator[tuple[int, dict[str, GroupRoutes], list]]:
    """The reference replay, stopping after every instant: expire brokers whose deadline is
    before t, then apply the events at t (the same order as replay())."""
    ordered = sorted(
        ((e.eventTime, i, e) for i, e in enumerate(events) if e.eventTime <= until),
        key=lambda item: item[:2],
    )
    groups: dict[str, GroupRoutes] = {}
    i = 0
    while True:
        candidates = [ordered[i][0]] if i < len(ordered) else []
        deadlines = [d for g in groups.values() if (d := g.next_deadline()) is not None]
        candidates += [min(deadlines) + 1] if deadlines else []
        if not candidates or min(candidates) > until:
            return
        t = min(candidates)
        expired = [(name, key, d) for name, g in groups.items() for key, d in g.expire(t)]
        while i < len(ordered) and ordered[i][0] == t:
            event = ordered[i][2]
            routes = groups.setdefault(event.brokerName, GroupRoutes(event.brokerName))
            apply_event(routes, event, DEFAULT_FLAGS)
            i += 1
        yield t, groups, expired


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).date().isoformat()


def core_facts(events: list, until: int, samples: set[int]) -> Facts:
    facts = Facts()
    was_masterless: dict[str, bool] = {}
    last_version: dict[tuple[str, str], Any] = {}  # (topic, name) -> its latest QueueData
    present: dict[str, set[str]] = {}  # broker_name -> topics in topicQueueTable now
    gone_at: dict[tuple[str, str], int] = {}
    sizes: dict[str, int] = {}
    for t, groups, expired in _instants(events, until):
        facts.instants.append(t)
        for name, (cluster, addr), deadline in expired:
            facts.expiries[(cluster, name, addr, _day(deadline + 1))] += 1
        now_sizes: Counter = Counter()
        for name, g in groups.items():
            data = g.broker_data
            masterless = bool(data and data.broker_addrs) and 0 not in data.broker_addrs
            if masterless and not was_masterless.get(name):
                facts.masterless.setdefault(name, []).append([t, None])
            elif not masterless and was_masterless.get(name):
                facts.masterless[name][-1][1] = t
            was_masterless[name] = masterless
            now_sizes.update(g.clusters)

            listed = present.setdefault(name, set())
            for topic, queue in g.topics.items():
                key = (topic, name)
                previous = last_version.get(key)
                if topic in listed and previous == queue:
                    continue  # same version as at the previous instant
                if (
                    previous is not None
                    and previous.perm & PERM_WRITE
                    and not queue.perm & PERM_WRITE
                ):
                    previous_to = t if topic in listed else gone_at[key]
                    facts.perm_lost.append((topic, name, t, previous.perm, queue.perm, previous_to))
                last_version[key] = queue
            for topic in listed - g.topics.keys():
                gone_at[(topic, name)] = t
            present[name] = set(g.topics)
        for cluster in sorted(set(sizes) | set(now_sizes)):
            if sizes.get(cluster, 0) != now_sizes.get(cluster, 0):
                facts.cluster_sizes.append((cluster, t, now_sizes.get(cluster, 0)))
        sizes = dict(now_sizes)
        if t in samples:
            facts.routes[t] = _routes(groups)
            assert canonical_dump(fleet_rows(groups.values()), t) == replay_dump(events, t)
            facts.checked_against_replay += 1
    facts.perm_lost.sort(key=lambda r: (r[2], r[0], r[1]))
    return facts


def _routes(groups: dict[str, GroupRoutes]) -> dict[str, dict[str, tuple]]:
    out: dict[str, dict[str, tuple]] = {}
    for name, g in groups.items():
        data = g.broker_data
        cluster = data.cluster if data else None
        master = data.broker_addrs.get(0) if data else None
        for topic, q in g.topics.items():
            out.setdefault(topic, {})[name] = (
                q.read_queue_nums,
                q.write_queue_nums,
                q.perm,
                q.topic_sys_flag,
                cluster,
                master,
            )
    return out


@dataclass
class Fleet:
    warehouse: Path
    events: list
    watermark: int
    frames: dict[str, pd.DataFrame]
    rows: dict[str, list[dict]]
    facts: Facts
    samples: list[int]


@pytest.fixture(scope="module")
def fleet(spark, config, tmp_path_factory) -> Fleet:
    from routing_lib.jobs.backfill import run_backfill

    warehouse = tmp_path_factory.mktemp("recipes") / "warehouse"
    run_backfill(
        config,
        [str(GOLDEN / name / "events.jsonl") for name in FIXTURES],
        str(warehouse),
        spark=spark,
    )
    events = [parse_event(line) for name in FIXTURES for line in fixture_lines(name)]
    watermark = default_watermark(events, DELAY_MS)
    times = sorted({e.eventTime for e in events if e.eventTime <= watermark})
    samples = sorted(random.Random(7).sample(times[:-1], 12) + [times[-1]])
    facts = core_facts(events, watermark, set(samples))
    assert facts.checked_against_replay == len(set(samples))
    return Fleet(
        warehouse,
        events,
        watermark,
        hr.load_frames(warehouse),
        load_history(warehouse),
        facts,
        samples,
    )


def records(frame: pd.DataFrame) -> list[tuple]:
    """DataFrame rows as tuples of plain values (<NA> -> None)."""
    return [
        tuple(None if pd.isna(v) else v for v in row)
        for row in frame.astype(object).itertuples(index=False)
    ]


def assert_spark_answer(
    spark, fleet: Fleet, sql: str, expected: list[tuple], **params: Any
) -> None:
    """The recipe's Spark SQL answer equals `expected` (rows in order), compared by chispa as
    DataFrames: the expected rows take the answer's schema, so a column of another type or
    name fails too."""
    answer = hr.spark_sql(spark, sql, fleet.warehouse, **params)
    assert_df_equality(answer, spark.createDataFrame(expected, answer.schema))


def test_routes_at(fleet, spark):
    topics = sorted(set(fleet.frames["topic_route_history"]["topic"]))
    rng = random.Random(11)
    for t in fleet.samples:
        replayed = replay_dump(fleet.events, t)["topicQueueTable"]
        for topic in {TOPIC, "NoSuchTopic", *rng.sample(topics, 8)}:
            expected = fleet.facts.routes[t].get(topic, {})
            got = hr.routes_at(fleet.frames, topic, t)
            assert records(got.drop(columns="since")) == [
                (name, *expected[name][4:], *expected[name][:4]) for name in sorted(expected)
            ]
            assert {
                r.broker_name: (r.read_queue_nums, r.write_queue_nums, r.perm, r.topic_sys_flag)
                for r in got.itertuples()
            } == {
                name: (q["readQueueNums"], q["writeQueueNums"], q["perm"], q["topicSysFlag"])
                for name, q in replayed.get(topic, {}).items()
            }
    t = fleet.samples[len(fleet.samples) // 2]
    pandas = hr.routes_at(fleet.frames, TOPIC, t)
    assert len(pandas) > 1
    assert records(hr.routes_at(fleet.rows, TOPIC, t)) == records(pandas)
    assert_spark_answer(spark, fleet, hr.ROUTES_AT_SQL, records(pandas), topic=TOPIC, at=t)


def test_masterless_intervals(fleet, spark):
    pandas = hr.masterless_intervals(fleet.frames)
    expected = sorted(
        (name, start, end) for name, spans in fleet.facts.masterless.items() for start, end in spans
    )
    assert records(pandas) == expected
    assert len(expected) > 10
    assert ("broker-a", 1764000005000, 1764000121001) in expected  # fixture 11: slave left
    assert records(hr.masterless_intervals(fleet.rows)) == expected
    assert_spark_answer(spark, fleet, hr.MASTERLESS_INTERVALS_SQL, expected)

    # Sample State(T) by the reference replay inside and just outside some intervals.
    for name, start, end in random.Random(3).sample(expected, 6):
        last = end - 1 if end is not None else fleet.watermark
        for t, inside in ((start, True), (last, True), (start - 1, False), (end, False)):
            if t is None or t > fleet.watermark:
                continue
            entry = replay_dump(fleet.events, t)["brokerAddrTable"].get(name)
            assert (entry is not None and "0" not in entry["brokerAddrs"]) == inside, (name, t)


def test_write_perm_lost(fleet, spark):
    everything = hr.write_perm_lost(fleet.frames, 0, fleet.watermark + 1)
    assert records(everything) == [
        r[:5] + (_started_by(fleet, r), _addr(fleet, r), r[5]) for r in fleet.facts.perm_lost
    ]
    assert {"PERM_WIPED", "CONFIG_CHANGED"} <= set(everything["started_by"])
    wiped = everything[everything["broker_name"] == "broker-a"]  # fixture 11
    assert sorted(wiped["topic"]) == ["DefaultCluster", "Orders", TOPIC]
    assert records(wiped[["topic", "lost_at", "previous_perm", "perm", "started_by"]]) == [
        (topic, 1764000005000, 7 if topic == TOPIC else 6, 5 if topic == TOPIC else 4, "PERM_WIPED")
        for topic in sorted(wiped["topic"])
    ]

    # [A, B): A included, B excluded.
    times = sorted(set(everything["lost_at"]))
    a, b = times[len(times) // 3], times[2 * len(times) // 3]
    window = hr.write_perm_lost(fleet.frames, a, b)
    assert records(window) == [r for r in records(everything) if a <= r[2] < b]
    assert window["lost_at"].min() == a and b not in set(window["lost_at"])
    assert records(hr.write_perm_lost(fleet.rows, a, b)) == records(window)
    assert_spark_answer(spark, fleet, hr.WRITE_PERM_LOST_SQL, records(window), start=a, end=b)
    for row in window.head(5).itertuples():  # the reference agrees at both ends
        before = replay_dump(fleet.events, row.lost_at - 1)["topicQueueTable"]
        after = replay_dump(fleet.events, row.lost_at)["topicQueueTable"]
        assert after[row.topic][row.broker_name]["perm"] == row.perm
        if row.previous_valid_to == row.lost_at:
            assert before[row.topic][row.broker_name]["perm"] == row.previous_perm


def _history_row(fleet: Fleet, fact: tuple) -> dict:
    topic, name, t = fact[:3]
    rows = fleet.frames["topic_route_history"]
    match = rows[
        (rows["topic"] == topic) & (rows["broker_name"] == name) & (rows["valid_from"] == t)
    ]
    assert len(match) == 1, fact
    return match.iloc[0]


def _started_by(fleet: Fleet, fact: tuple) -> str:
    return _history_row(fleet, fact)["started_by"]


def _addr(fleet: Fleet, fact: tuple) -> str:
    return _history_row(fleet, fact)["start_broker_addr"]


def test_frequent_expiries(fleet, spark):
    counted = Counter(
        (r["cluster_name"], r["broker_name"], r["broker_addr"], _day(r["event_time"]))
        for r in fleet.rows[BROKER_LIVENESS_EVENTS]
        if r["event_type"] == EXPIRED
    )
    assert counted == fleet.facts.expiries
    for n in (0, 3, 30):
        pandas = hr.frequent_expiries(fleet.frames, n)
        expected = sorted(
            ((*key, c) for key, c in counted.items() if c > n),
            key=lambda r: (r[3], -r[4], r[0], r[2]),
        )
        assert records(pandas) == expected
        assert records(hr.frequent_expiries(fleet.rows, n)) == expected
    assert len(hr.frequent_expiries(fleet.frames, 3)) > 1
    expected_3 = records(hr.frequent_expiries(fleet.frames, 3))
    assert_spark_answer(spark, fleet, hr.FREQUENT_EXPIRIES_SQL, expected_3, n=3)


def test_cluster_sizes(fleet, spark):
    pandas = hr.cluster_sizes(fleet.frames)
    expected = sorted(fleet.facts.cluster_sizes)
    assert records(pandas) == expected
    assert {c for c, _, _ in expected} >= {"cluster-0", "cluster-1", "cluster-2", "DefaultCluster"}
    assert records(hr.cluster_sizes(fleet.rows)) == expected
    assert_spark_answer(spark, fleet, hr.CLUSTER_SIZES_SQL, expected)
    # The reference replay at some change points and 1 ms before them.
    previous = {}
    sampled = set(random.Random(5).sample(range(len(expected)), 8))
    for i, (cluster, at, size) in enumerate(expected):
        if i in sampled:
            before = replay_dump(fleet.events, at - 1)["clusterAddrTable"].get(cluster, [])
            now = replay_dump(fleet.events, at)["clusterAddrTable"].get(cluster, [])
            assert (len(before), len(now)) == (previous.get(cluster, 0), size), (cluster, at)
        previous[cluster] = size


def test_history_plot(fleet, tmp_path, capsys):
    from routing_lib.history_plot import plot_history  # matplotlib: ~0.5 s at collection

    out = plot_history(fleet.warehouse, tmp_path / "plots" / "fleet.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    small = plot_history(fleet.warehouse, tmp_path / "a.png", broker_names=["broker-a"])
    assert small.stat().st_size < out.stat().st_size
    assert (
        main(
            [
                "history",
                "plot",
                "--warehouse",
                str(fleet.warehouse),
                "--out",
                str(tmp_path / "cli.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "cli.png").exists() and "wrote" in capsys.readouterr().out


# ---- (f) write permission changes: fixture 14 plus more operators' requests --------------------

PERM_EXTRA = [
    # broker-a re-registered with a new dataVersion at +40 s: its own perms are back
    {"eventType": "WIPE_WRITE_PERM", "brokerName": "broker-a", "requestedBy": "10.0.7.7:50000"},
    {"eventType": "WIPE_WRITE_PERM", "brokerName": "broker-a", "requestedBy": "10.0.7.7:50000"},
    {"eventType": "ADD_WRITE_PERM", "brokerName": "broker-a", "requestedBy": "10.0.8.8:1234"},
    {"eventType": "PUT_KV", "namespace": "team", "key": "owner", "value": "x", "requestedBy": "o"},
    {"eventType": "DELETE_TOPIC", "topic": "Payments", "requestedBy": "10.0.8.8:1234"},
    {"eventType": "ADD_WRITE_PERM", "brokerName": "no-such-broker", "requestedBy": "10.0.8.8:1"},
]
PERM_EXTRA_T0 = 1764000045000  # one event per second from here; the watermark is +60 s


@pytest.fixture(scope="module")
def perm_audit(spark, config, tmp_path_factory) -> tuple[Path, list, Path]:
    """Fixture 14 and PERM_EXTRA as two archive files, through the real backfill."""
    from routing_lib.jobs.backfill import run_backfill

    root = tmp_path_factory.mktemp("perm-audit")
    extra = root / "extra.jsonl"
    extra.write_text(
        "".join(
            json.dumps({**e, "eventTime": PERM_EXTRA_T0 + 1000 * i}) + "\n"
            for i, e in enumerate(PERM_EXTRA)
        )
    )
    fixture = GOLDEN / "14_write_perm_admin" / "events.jsonl"
    run_backfill(config, [str(fixture), str(extra)], str(root / "warehouse"), spark=spark)
    lines = fixture_lines("14_write_perm_admin") + extra.read_text().splitlines()
    return root / "warehouse", [parse_event(line) for line in lines], extra


def _perm_changed_topics(events: list, broker: str, t: int) -> list[str]:
    """The reference replay: topics of `broker` whose perm differs between t-1 and t."""
    before = replay_dump(events, t - 1)["topicQueueTable"]
    after = replay_dump(events, t)["topicQueueTable"]
    return sorted(
        topic
        for topic in after
        if broker in after[topic]
        and broker in before.get(topic, {})
        and after[topic][broker]["perm"] != before[topic][broker]["perm"]
    )


def test_write_perm_changes(perm_audit, spark):
    warehouse, events, extra = perm_audit
    frames = hr.load_frames(warehouse)
    fixture = str(GOLDEN / "14_write_perm_admin" / "events.jsonl")
    a_topics, b_topics = "DefaultCluster,Orders,TBW102", "DefaultCluster,Payments,TBW102"
    expected = {
        "broker-a": [
            (1764000005000, "WIPE_WRITE_PERM", "broker-a", "10.0.5.5:40000", 3, a_topics, 3),
            (1764000045000, "WIPE_WRITE_PERM", "broker-a", "10.0.7.7:50000", 3, a_topics, 1),
            (1764000046000, "WIPE_WRITE_PERM", "broker-a", "10.0.7.7:50000", 0, "", 2),
            (1764000047000, "ADD_WRITE_PERM", "broker-a", "10.0.8.8:1234", 3, a_topics, 3),
        ],
        "broker-b": [
            (1764000006000, "WIPE_WRITE_PERM", "broker-b", "10.0.5.5:40000", 3, b_topics, 4),
            (1764000035000, "ADD_WRITE_PERM", "broker-b", "10.0.5.5:40000", 3, b_topics, 8),
        ],
        "no-such-broker": [
            (1764000007000, "WIPE_WRITE_PERM", "no-such-broker", "10.0.5.5:40000", 0, "", 5),
            (1764000050000, "ADD_WRITE_PERM", "no-such-broker", "10.0.8.8:1", 0, "", 6),
        ],
        "clock": [],
    }
    rows = load_history(warehouse)
    for broker, want in expected.items():
        got = records(hr.write_perm_changes(frames, broker))
        # source: the archive file; position: its line (1-based)
        assert [r[:6] + r[7:] for r in got] == want, broker
        assert [Path(r[6]).name for r in got] == [
            Path(fixture if w[0] < PERM_EXTRA_T0 else extra).name for w in want
        ]
        for r in got:  # each row's topics are what the reference replay changed then
            assert r[5] == ",".join(_perm_changed_topics(events, broker, r[0])), r
        assert records(hr.write_perm_changes(rows, broker)) == got
        sql = hr.spark_sql(spark, hr.WRITE_PERM_CHANGES_SQL, warehouse, broker=broker)
        assert [tuple(row) for row in sql.collect()] == got
