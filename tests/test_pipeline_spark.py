"""Spark pipeline behaviours beyond the fixtures: bad input, huge registrations, replays."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from routing_lib.core.catalog import CATALOG
from routing_lib.core.tables import (
    BROKER_LIVE,
    DEAD_LETTER,
    PROGRESS,
    TOPIC_QUEUE,
)
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.warehouse import table_versions
from tests.support.bad_records import BAD_RECORDS
from tests.support.helpers import GOLDEN, expected_dump, fixture_lines

pytestmark = pytest.mark.spark


def rows(warehouse, table) -> list[dict]:
    return DeltaTable(str(warehouse / table)).to_pyarrow_table().to_pylist()


def test_bad_records_are_dead_lettered_and_good_ones_applied(backfill, tmp_path):
    name = "10_filter_servers"
    good = [line.encode() for line in fixture_lines(name)]
    rng = random.Random(5)
    lines: list[tuple[bytes, str | None]] = [(g, None) for g in good]
    for kind, raw, _ in BAD_RECORDS:
        lines.insert(rng.randint(0, len(lines)), (raw, kind))
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(raw + b"\n" for raw, _ in lines))

    assert backfill([path]) == expected_dump(name)

    dead = {row["position"]: row for row in rows(backfill.warehouse, DEAD_LETTER)}
    expected_dead = {n: (raw, kind) for n, (raw, kind) in enumerate(lines, start=1) if kind}
    assert set(dead) == set(expected_dead)
    for position, (raw, kind) in expected_dead.items():
        row = dead[position]
        assert row["raw"] == raw, kind
        assert row["source"] == str(path) and row["reason"], kind
    progress = rows(backfill.warehouse, PROGRESS)
    total = {
        k: sum(r[k] for r in progress)
        for k in ("input_rows", "dead_lettered", "late", "accepted", "applied")
    }
    assert total["input_rows"] == len(lines)
    assert total["dead_lettered"] == len(BAD_RECORDS)
    assert total["accepted"] + total["dead_lettered"] + total["late"] == total["input_rows"]
    assert total["late"] == 0
    # Applied, or still waiting for the watermark (the last events of the archive).
    assert total["applied"] <= total["accepted"]
    assert_tables_are_the_catalogs(backfill.warehouse)


def assert_tables_are_the_catalogs(warehouse) -> None:
    """Every table the job created has the catalog's columns, types and partitioning, and its
    change data feed on."""
    for spec in CATALOG:
        table = DeltaTable(str(warehouse / spec.name))
        schema = pa.schema(table.schema().to_arrow())
        assert schema.equals(arrow_schema(spec)), (spec.name, schema)
        metadata = table.metadata()
        assert metadata.partition_columns == list(spec.partition_by), spec.name
        assert metadata.configuration["delta.enableChangeDataFeed"] == "true", spec.name


def test_replayed_batch_changes_nothing(spark, backfill, tmp_path):
    """A micro-batch replayed after a crash (same batch id) is skipped by every table."""
    from routing_lib.metrics import JobMetrics
    from routing_lib.spark.delta_writer import BatchReport, DeltaRouteWriter
    from routing_lib.spark.stateful import OUTPUT_SCHEMA

    backfill([GOLDEN / "01_master_registers" / "events.jsonl"])
    warehouse = backfill.warehouse
    live = {
        "cluster_name": "C",
        "broker_addr": "1.1.1.1:1",
        "broker_name": "x",
        "last_update_timestamp": 5,
        "heartbeat_timeout_millis": 120000,
        "ha_server_addr": None,
        "data_version": {"state_version": 0, "timestamp": 0, "counter": 0},
    }
    batch = spark.createDataFrame(
        [
            ("change", BROKER_LIVE, "upsert", json.dumps([live]), None),
            dead_letter_row(1, "not JSON: Expecting value"),
            dead_letter_row(2, "internal error: KeyError: 'x'"),  # failed in the step
            (
                "stats",
                None,
                None,
                json.dumps(
                    {
                        "input_rows": 2,
                        "dead_lettered": 1,
                        "failed_in_step": 1,
                        "writes": [f"change/{BROKER_LIVE}", f"dead/{DEAD_LETTER}"],
                    }
                ),
                None,
            ),
        ],
        OUTPUT_SCHEMA,
    )
    reports: list[BatchReport] = []
    writer = DeltaRouteWriter(str(warehouse), "replay-test", lambda batch_id: 42, reports.append)
    writer(batch, 1000)
    versions = table_versions(warehouse)
    lives = rows(warehouse, BROKER_LIVE)
    writer(batch, 1000)  # the replay
    assert table_versions(warehouse) == versions
    assert rows(warehouse, BROKER_LIVE) == lives
    assert len([r for r in rows(warehouse, DEAD_LETTER) if r["source"] == "s"]) == 2
    assert len(rows(warehouse, TOPIC_QUEUE)) == 3

    # The replay's dead letters are counted by their reasons, as the first run's were.
    metrics = JobMetrics()
    for report in reports:
        metrics.record_batch(report.watermark, report.counts, 1.0, None, report.dead_letter_reasons)
    dead_letters = "routelake_job_dead_letters_total"
    assert metrics.get(dead_letters, reason="not_json") == 2
    assert metrics.get(dead_letters, reason="internal_error") == 2
    assert not metrics.has(dead_letters, reason="invalid_event")
    assert not metrics.has(dead_letters, reason="unknown")


def dead_letter_row(position: int, reason: str) -> tuple[str, str, str, str, bytes]:
    """A step output row of one dead letter (routing_lib/spark/stateful.py's form)."""
    row = {"raw_text": "x", "source": "s", "position": position, "reason": reason}
    return ("dead", DEAD_LETTER, "append", json.dumps(row), b"x")


def test_integers_at_their_bounds_reach_the_tables(backfill, tmp_path):
    """The widest values the schema accepts go through Arrow, the state timeout (a
    deadline past INT64_MAX) and every Delta column without failing the query."""
    from routing_lib.core.dump import project
    from routing_lib.core.replay import replay_dump
    from schemas import parse_event
    from tests.support.bad_records import extreme_register

    high = extreme_register(low=False)
    records = [
        dict(high, brokerId=0),
        dict(high, brokerAddr="10.9.0.2:10911"),
        dict(
            extreme_register(low=True),
            brokerName="edge-low",
            brokerAddr="10.9.0.3:10911",
            eventTime=high["eventTime"] - 10,
        ),
    ]
    path = tmp_path / "edges.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    # dated in year 9999: a synthetic archive, past the backfill's wall-clock check
    dump = backfill([path], as_of=high["eventTime"], allow_future_events=True)
    events = [parse_event(json.dumps(r)) for r in records]
    assert dump == project(replay_dump(events, high["eventTime"]))
    # the 1 ms timeout of the low-values broker has passed; the INT64_MAX one never does
    assert {b["brokerAddr"] for b in dump["brokerLiveTable"]} == {
        "10.9.0.1:10911",
        "10.9.0.2:10911",
    }
    assert rows(backfill.warehouse, DEAD_LETTER) == []


def test_replayed_batch_0_appends_nothing_twice(backfill, tmp_path):
    """A crash between batch 0's Delta commits and Spark's commits/0 replays batch 0: its dead
    letter and progress row are in already (the tables' txn version is 0) and stay single."""
    base = {"clusterName": "C", "brokerAddr": "10.0.0.1:10911", "brokerName": "b", "brokerId": 0}
    register = dict(
        base,
        eventType="REGISTER",
        eventTime=1_000,
        haServerAddr="10.0.0.1:10912",
        dataVersion={"stateVersion": 0, "timestamp": 1, "counter": 1},
        topicConfigTable={},
    )
    heartbeat = dict(base, eventType="HEARTBEAT", eventTime=2_000)
    path = tmp_path / "first.jsonl"
    # all inside the watermark delay of time 0: the watermark stays 0, so Spark runs batch 0 alone
    path.write_text(json.dumps(register) + "\n" + json.dumps(heartbeat) + "\nnot json\n")
    first = backfill([path])
    checkpoint = backfill.warehouse / "_checkpoints" / "backfill"
    commits = checkpoint / "commits"
    assert sorted(p.name for p in commits.iterdir() if not p.name.startswith(".")) == ["0"]
    dead, progress = rows(backfill.warehouse, DEAD_LETTER), rows(backfill.warehouse, PROGRESS)
    assert len(dead) == 1 and [r["batch_id"] for r in progress] == [0]

    for name in ("0", ".0.crc"):  # the crash: Delta has batch 0, Spark's commit log does not
        (commits / name).unlink(missing_ok=True)
    assert backfill([path]) == first
    assert len(rows(backfill.warehouse, DEAD_LETTER)) == 1
    assert [r["batch_id"] for r in rows(backfill.warehouse, PROGRESS)] == [0]


def test_an_event_at_time_1_is_in_the_tables_at_watermark_1(backfill, config, tmp_path):
    """eventTime 1 is the least the schema admits; a history whose watermark ends at exactly 1
    publishes State(1), with that event applied (its group's state timeout must fire there)."""
    from routing_lib.core.dump import project
    from routing_lib.core.replay import default_watermark, replay_dump
    from schemas import parse_event
    from tests.support.bad_records import extreme_register

    delay = config.routes.watermark_delay_ms
    records = [
        dict(extreme_register(low=True), heartbeatTimeoutMillis=120_000),
        {"eventType": "TICK", "eventTime": delay + 1},
    ]
    path = tmp_path / "early.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    events = [parse_event(json.dumps(r)) for r in records]
    assert default_watermark(events, delay) == 1
    dump = backfill([path])
    assert dump == project(replay_dump(events, 1))
    assert [b["brokerAddr"] for b in dump["brokerLiveTable"]] == ["10.9.0.1:10911"]
