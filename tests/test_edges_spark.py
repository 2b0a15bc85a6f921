"""Values at the schema's edges through the backfill and the Kafka paths, table-driven.

One history holds every edge, each in a broker group of its own (so one Spark run covers them
all): event time 1 and its maximum, dataVersion counters and timestamps and every other
integer at both ends, zero, one and 20 000 topics, groups of only slaves, an UNREGISTER before
any REGISTER, a TICK first, names at their longest, and event times just outside the range.
Each run's tables equal the plain replay (routing_lib/core/replay.py) of the events it
accepted, its history equals the replay at every event time, and every other record is a dead
letter with its reason. The Kafka run also replays batch 0 and its last batch N after a
crash, and runs with nothing new."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from routing_lib.core.as_of import as_of_view
from routing_lib.core.dump import project
from routing_lib.core.replay import default_watermark, fleet_rows, replay, replay_dump
from routing_lib.core.tables import BROKER_LIVE, DEAD_LETTER, PROGRESS
from routing_lib.lookup.routes import RouteIndex
from routing_lib.read.history import as_of_dump
from routing_lib.read.warehouse import WarehouseSnapshot, load_snapshot
from schemas import parse_event
from schemas.route_event import (
    INT64_MAX,
    MAX_EVENT_TIME_MS,
    NAME_MAX_LENGTH,
    TOPIC_NAME_MAX_LENGTH,
)
from tests.support.bad_records import extreme_register
from tests.support.fault_support import assert_no_row_twice
from tests.support.kafka_support import produce, rows

pytestmark = pytest.mark.spark

T = 1_764_000_000_000  # the fleet's time: in the past, so no wall-clock check refuses it
DELAY_MS = 10_000  # conf/routelake.toml [routes] watermark_delay_ms


@dataclass(frozen=True)
class Edge:
    name: str
    records: list[dict]
    # None: accepted by both paths; else the reason's words for the paths that refuse it
    dead_in_backfill: str | None = None
    dead_in_kafka: str | None = None


def topic_config(name: str) -> dict:
    return {
        "topicName": name,
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
        "topicSysFlag": 0,
    }


def register(group: str, host: int, broker_id: int, at: int, topics: list[str], **extra) -> dict:
    """`host`: the address's last byte, unique in the history (one address, one broker)."""
    return {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "Edge",
        "brokerAddr": f"10.8.0.{host}:10911",
        "brokerName": group,
        "brokerId": broker_id,
        "haServerAddr": None,
        "dataVersion": {"stateVersion": 0, "timestamp": at, "counter": 1},
        "topicConfigTable": {t: topic_config(t) for t in topics},
        **extra,
    }


def broker_event(kind: str, of: dict, at: int) -> dict:
    keys = ("clusterName", "brokerAddr", "brokerName", "brokerId")
    return {"eventType": kind, "eventTime": at, **{k: of[k] for k in keys}}


def edges() -> list[Edge]:
    """The fleet's events lie in [T, T + 10 s), less than the watermark delay apart, then in
    event-time order up to T + 60 s, so none is late however the input is cut into
    micro-batches; the two at event time 1 come first."""
    low = dict(extreme_register(low=True), brokerName="edge-low", heartbeatTimeoutMillis=60_000)
    high = dict(
        extreme_register(low=False),  # brokerId INT64_MAX: a slave; heartbeat timeout INT64_MAX
        brokerName="edge-high",
        brokerAddr="10.9.9.9:10911",
        eventTime=MAX_EVENT_TIME_MS - DELAY_MS,  # applied at the watermark the maximum gives
    )
    slaves = [register("edge-slaves", 10 + n, n, T + 2_000, ["OnlySlaves"]) for n in (1, 2)]
    lone = register("edge-unregister-first", 3, 0, T + 3_000, ["Lone"])
    one = register("edge-one-topic", 4, 0, T + 4_000, ["One"])
    longest = register(
        "n" * NAME_MAX_LENGTH,
        5,
        0,
        T + 5_000,
        ["t" * TOPIC_NAME_MAX_LENGTH],
        clusterName="c" * NAME_MAX_LENGTH,
    )
    big = register("edge-20000-topics", 6, 0, T + 6_000, [f"T{i:05d}" for i in range(20_000)])
    zero = register("edge-zero-topics", 7, 0, T + 7_000, [])
    dv_max = {"stateVersion": INT64_MAX, "timestamp": INT64_MAX, "counter": INT64_MAX}
    # One address under two brokerNames (a broker renamed in place), the only edge whose
    # groups share an address. Both at host 20 stay live (to the backfill's year-9999
    # watermark too), applied in one batch on both paths: two groups' rows of one (cluster,
    # address) in one MERGE (the Kafka run's watermark goes from T + 5 s to T + 16 s or more
    # in one batch). At host 21, on the Kafka path, the old name is applied at watermark
    # T + 16-20 s; at T + 31 s its heartbeat and the new name's registration, two changes of
    # the row the table has, in one MERGE; the old name expires at T + 50 s while the new one
    # stays live. The first TICKs at 26 s, 41 s and 60 s are three records apart, so each is
    # in another of the run's three-record batches. Event times other edges have already
    # where they can: each one is an as-of probe.
    forever = {"heartbeatTimeoutMillis": 10**15}  # past MAX_EVENT_TIME_MS
    renamed_b = register(
        "edge-renamed-b",
        20,
        0,
        T + 6_000,
        ["RenamedB"],
        filterServerList=["10.8.1.20:30000"],
        **forever,
    )
    renamed_a = register("edge-renamed-a", 20, 0, T + 7_000, ["RenamedA"], **forever)
    renamed_old = register(
        "edge-renamed-old", 21, 0, T + 15_000, ["RenamedOld"], heartbeatTimeoutMillis=20_000
    )
    renamed_new = register("edge-renamed-new", 21, 0, T + 30_000, ["RenamedNew"], **forever)
    future = "clock skew"  # the stream refuses what the backfill takes with --allow-future-events
    return [
        Edge("a TICK first, at event time 1", [{"eventType": "TICK", "eventTime": 1}]),
        Edge("event time 1, every integer at its low end", [low]),
        Edge("event time 0", [{"eventType": "TICK", "eventTime": 0}], "eventTime", "eventTime"),
        Edge("the fleet's first event, a TICK", [{"eventType": "TICK", "eventTime": T}]),
        Edge(
            "an UNREGISTER before any REGISTER",
            [broker_event("UNREGISTER", lone, T + 1_000), lone],
        ),
        Edge("a group of only slaves", [*slaves, broker_event("HEARTBEAT", slaves[0], T + 9_000)]),
        Edge("one topic", [one]),
        Edge("names at their longest", [longest]),
        Edge("20 000 topics", [big, broker_event("HEARTBEAT", big, T + 9_500)]),
        Edge("zero topics", [zero, dict(zero, eventTime=T + 8_000, dataVersion=dv_max)]),
        Edge(
            "one address under two brokerNames, in one batch and across batches",
            [
                renamed_b,
                renamed_a,
                renamed_old,
                {"eventType": "TICK", "eventTime": T + 26_000},
                broker_event("HEARTBEAT", renamed_old, T + 29_000),
                renamed_new,
                *[{"eventType": "TICK", "eventTime": T + 41_000}] * 3,
            ],
        ),
        Edge("the fleet's clock moves on", [{"eventType": "TICK", "eventTime": T + 60_000}]),
        Edge("integers at their high end", [high], None, future),
        Edge(
            "the maximum event time",
            [{"eventType": "TICK", "eventTime": MAX_EVENT_TIME_MS}],
            None,
            future,
        ),
        Edge(
            "event time past the maximum",
            [{"eventType": "TICK", "eventTime": MAX_EVENT_TIME_MS + 1}],
            "eventTime",
            "eventTime",
        ),
    ]


def lines_and_expected(path: str) -> tuple[list[bytes], list[str], dict[int, str]]:
    """All lines in arrival order, the accepted ones, and {line index: reason words} of the
    dead letters, for the path ("backfill" or "kafka")."""
    lines: list[bytes] = []
    accepted: list[str] = []
    dead: dict[int, str] = {}
    for edge in edges():
        reason = edge.dead_in_backfill if path == "backfill" else edge.dead_in_kafka
        for record in edge.records:
            if reason is None:
                accepted.append(json.dumps(record))
            else:
                dead[len(lines)] = reason
            lines.append(json.dumps(record).encode())
    return lines, accepted, dead


def assert_equals_the_replay(
    warehouse: Path, dump: dict, accepted: list[str], dead: dict[int, str], first_position: int
) -> None:
    """Tables, history at every event time, dead letters and progress of one run."""
    events = [parse_event(line) for line in accepted]
    watermark = default_watermark(events, DELAY_MS)
    assert dump == project(replay_dump(events, watermark))
    assert_no_row_twice(warehouse)
    assert_renamed_broker(warehouse, dump, events, watermark)
    for at in sorted({e.eventTime for e in events if e.eventTime <= watermark} | {watermark}):
        assert as_of_dump(warehouse, at) == as_of_view(replay_dump(events, at)), f"as of {at}"
    letters = {r["position"] - first_position: r["reason"] for r in rows(warehouse, DEAD_LETTER)}
    assert sorted(letters) == sorted(dead)
    for index, words in dead.items():
        assert words in letters[index], (index, letters[index])
    progress = rows(warehouse, PROGRESS)
    batch_ids = [r["batch_id"] for r in progress]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was published twice"
    assert sum(r["input_rows"] for r in progress) == len(accepted) + len(dead)
    assert sum(r["dead_lettered"] for r in progress) == len(dead)
    assert sum(r["late"] for r in progress) == 0


def assert_renamed_broker(warehouse: Path, dump: dict, events: list, watermark: int) -> None:
    """The renamed broker's addresses: one live entry each in the dump, the lookup's answers
    from the warehouse equal to those from the replay's rows, the table one row per name."""
    live = {(r["clusterName"], r["brokerAddr"]): r for r in dump["brokerLiveTable"]}
    assert len(live) == len(dump["brokerLiveTable"])
    assert live["Edge", "10.8.0.20:10911"]["lastUpdateTimestamp"] == T + 7_000
    assert live["Edge", "10.8.0.21:10911"]["lastUpdateTimestamp"] == T + 30_000
    names = {
        (r["broker_addr"], r["broker_name"])
        for r in rows(warehouse, BROKER_LIVE)
        if r["broker_addr"] in ("10.8.0.20:10911", "10.8.0.21:10911")
    }
    assert names == {
        ("10.8.0.20:10911", "edge-renamed-a"),
        ("10.8.0.20:10911", "edge-renamed-b"),
        ("10.8.0.21:10911", "edge-renamed-new"),
    }
    served = RouteIndex(load_snapshot(warehouse))
    replayed = RouteIndex(
        WarehouseSnapshot(fleet_rows(replay(events, watermark).values()), {}, watermark)
    )
    assert served.live_brokers == replayed.live_brokers
    for topic in ("RenamedA", "RenamedB", "RenamedNew", "RenamedOld"):
        assert served.route(topic) == replayed.route(topic), topic
    # the later name registered without filter servers: the earlier name's stay (Java: absent
    # leaves the address's list as it is)
    assert served.route("RenamedA")["filterServerTable"] == {"10.8.0.20:10911": ["10.8.1.20:30000"]}
    assert served.route("RenamedOld") is None  # its group expired


def test_edges_through_the_backfill(backfill, tmp_path):
    lines, accepted, dead = lines_and_expected("backfill")
    path = tmp_path / "edges.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    dump = backfill([path], allow_future_events=True)  # a synthetic archive reaching year 9999
    assert_equals_the_replay(backfill.warehouse, dump, accepted, dead, first_position=1)


def _drop_commit(checkpoint: Path, batch_id: int) -> None:
    """A crash after the batch's Delta commits, before Spark's commit log has it."""
    for name in (str(batch_id), f".{batch_id}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def _last_commit(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


@pytest.mark.kafka
def test_edges_through_kafka_with_replayed_and_empty_batches(job):
    lines, accepted, dead = lines_and_expected("kafka")
    # batch 0 alone: the first TICK and the event-time-1 register; then the crash and its replay
    produce(job.bootstrap, job.topic, lines[:2])
    job()
    assert _last_commit(job.checkpoint) == 0
    _drop_commit(job.checkpoint, 0)
    produce(job.bootstrap, job.topic, lines[2:])
    job(max_offsets_per_trigger=3)  # replays batch 0, then many small batches
    last = _last_commit(job.checkpoint)
    assert last > 3
    _drop_commit(job.checkpoint, last)
    job()  # replays batch N
    assert _last_commit(job.checkpoint) >= last
    progress = rows(job.warehouse, PROGRESS)
    # the renamed broker at host 21: the old name applied, then its heartbeat and the new
    # name while the old name is live, then the old name expired, in three batches
    watermarks = [r["watermark"] - T for r in progress]
    assert any(15_000 <= w < 29_000 for w in watermarks), watermarks
    assert any(30_000 <= w < 35_000 for w in watermarks), watermarks
    assert max(watermarks) == 50_000
    dump = job()  # a run with nothing new: no batch, nothing changes
    assert rows(job.warehouse, PROGRESS) == progress
    assert_equals_the_replay(job.warehouse, dump, accepted, dead, first_position=0)
