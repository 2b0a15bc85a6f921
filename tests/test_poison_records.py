"""Integers at and past their columns' bounds, and the last line of defence.

A record the schema accepts must fit every column it reaches; a record that makes stage one or
the stateful step raise anyway is dead-lettered with the exception's message, and the rest of
the batch goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from routing_lib import ingest
from routing_lib.core import clock as clock_module
from routing_lib.core.catalog import CATALOG, Column, Scalar, StructOf
from routing_lib.core.clock import GroupClock
from routing_lib.core.group_routes import DEFAULT_FLAGS, GroupRoutes
from routing_lib.core.history import HistoryTracker
from routing_lib.core.tables import BROKER_LIVE, DEAD_LETTER, rows_of
from routing_lib.core.wire import pack_event
from routing_lib.spark.sources import _classify_archives, make_kafka_classifier
from routing_lib.spark.watermark import job_watermark
from schemas import parse_event
from schemas.route_event import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    MAX_EVENT_TIME_MS,
)
from tests.support.bad_records import INTEGER_RANGE_RECORDS, extreme_register
from tests.support.helpers import fixture_lines
from tests.support.step_support import group_state, run_step

_RANGES = {Scalar.BIGINT: (INT64_MIN, INT64_MAX), Scalar.INT: (INT32_MIN, INT32_MAX)}


def _column_types(columns: tuple[Column, ...]) -> dict[str, Scalar]:
    """Top-level and struct-member integer columns: name -> INT | BIGINT."""
    types: dict[str, Scalar] = {}
    for column in columns:
        if isinstance(column.type, StructOf):
            types |= _column_types(column.type.fields)
        elif isinstance(column.type, Scalar) and column.type in _RANGES:
            types[column.name] = column.type
    return types


def _integers(row: dict, prefix: str = ""):
    for name, value in row.items():
        if isinstance(value, dict):
            yield from _integers(value, prefix)
        elif isinstance(value, int) and not isinstance(value, bool):
            yield name, value


@pytest.mark.parametrize("low", [True, False], ids=["lowest", "highest"])
def test_every_accepted_integer_fits_its_delta_column(low):
    master = extreme_register(low)
    slave = dict(master, brokerAddr="10.9.0.2:10911", brokerId=1 if low else INT64_MAX)
    master["brokerId"] = 0  # only a master's topic configs reach topic_queue_table
    clock, tracker = GroupClock(GroupRoutes("edge")), HistoryTracker("edge")
    for n, record in enumerate([master, slave]):
        clock.add(parse_event(json.dumps(record)), ("f", n))
    _, history = tracker.advance(clock, master["eventTime"], DEFAULT_FLAGS)
    columns = {}
    for spec in CATALOG:
        columns |= _column_types(spec.columns)
    rows = [
        (table, row) for table, table_rows in rows_of(clock.routes).items() for row in table_rows
    ] + [(change.table, change.row) for change in history]
    checked = set()
    for table, row in rows:
        for name, value in _integers(row):
            low_bound, high_bound = _RANGES[columns[name]]
            assert low_bound <= value <= high_bound, (table, name, value)
            checked.add(name)
    assert {
        "broker_id",
        "heartbeat_timeout_millis",
        "counter",
        "topic_sys_flag",
        "read_queue_nums",
        "perm",
        "last_update_timestamp",
    } <= checked


def test_a_deadline_past_int64_sets_no_timeout_it_could_not_hold():
    event = parse_event(json.dumps(extreme_register(low=False)))
    clock = GroupClock(GroupRoutes("edge"))
    clock.add(event, ("f", 1))
    clock.advance(MAX_EVENT_TIME_MS, DEFAULT_FLAGS)
    assert clock.wake_up_at() > INT64_MAX  # the step must not pass this to Spark
    state = group_state()
    out = run_step(
        [(MAX_EVENT_TIME_MS, "f", 2, pack_event(event))],
        state,
        watermark=MAX_EVENT_TIME_MS - 10_000,
    )
    assert state.exists and not out.empty


def test_an_event_at_time_1_is_applied_at_watermark_1():
    """eventTime 1, the least the schema admits, read while the watermark is 0: its group
    must run at watermark 1, which needs a state timeout pyspark accepts (>= 1)."""
    event = parse_event(json.dumps(dict(extreme_register(low=True), heartbeatTimeoutMillis=5)))
    state = group_state()
    first = run_step([(1, "f", 1, pack_event(event))], state, watermark=0)
    assert not [r for r in first.itertuples() if r.kind == "change"]  # not before watermark 1
    timeout = json.loads(state.json())["timeoutTimestamp"]
    # Spark fires once its watermark is past the timeout: the first such is the job's 1
    assert job_watermark(timeout + 1) == 1
    woken = run_step([], state, watermark=1)
    lives = [r for r in woken.itertuples() if r.kind == "change" and r.table == BROKER_LIVE]
    assert [json.loads(r.row_json)[0]["broker_addr"] for r in lives] == ["10.9.0.1:10911"]
    # its topics grew at 1: it runs at the next watermark, then at its deadline 6 + 1
    assert job_watermark(json.loads(state.json())["timeoutTimestamp"] + 1) == 2
    run_step([], state, watermark=2)
    assert job_watermark(json.loads(state.json())["timeoutTimestamp"] + 1) == 7


def test_integer_range_records_are_dead_letters_naming_the_field():
    for kind, raw, field in INTEGER_RANGE_RECORDS:
        classified = ingest.classify(raw, "f", 1, None, 0)
        assert classified.group_key == ingest.DEAD_LETTER_KEY, kind
        assert field in classified.reason, (kind, classified.reason)


# ---- the last line of defence ------------------------------------------------------------------


def _poisoned_parse(marker: bytes):
    real = ingest.parse_pipeline_event

    def parse(raw):
        if marker in raw:
            raise RuntimeError("injected failure")
        return real(raw)

    return parse


def _archive_frame(folder: Path, content: bytes) -> pd.DataFrame:
    """The frame archive_stream hands stage one: the archive file's path only."""
    archive = folder / "a.jsonl"
    archive.write_bytes(content)
    return pd.DataFrame({"path": [archive.as_uri()]})


def test_stage_one_failure_dead_letters_one_archive_line(monkeypatch, tmp_path):
    lines = [line.encode() for line in fixture_lines("02_master_and_slave")]
    monkeypatch.setattr(ingest, "parse_pipeline_event", _poisoned_parse(b'"brokerId":1,'))
    content = b"".join(line + b"\n" for line in lines)
    frames = list(_classify_archives(iter([_archive_frame(tmp_path, content)])))
    rows = pd.concat(frames)
    dead = rows[rows.group_key == ingest.DEAD_LETTER_KEY]
    poisoned = [n for n, line in enumerate(lines, start=1) if b'"brokerId":1,' in line]
    assert poisoned and sorted(dead.position) == poisoned
    assert set(dead.reason) == {"internal error: RuntimeError: injected failure"}
    assert len(rows) == len(lines)  # every other line classified as usual


def test_stage_one_failure_dead_letters_one_kafka_record(monkeypatch):
    monkeypatch.setattr(ingest, "parse_pipeline_event", _poisoned_parse(b"POISON"))
    good = fixture_lines("01_master_registers")[0].encode()
    frame = pd.DataFrame(
        {
            "value": [good, b"POISON", good],
            "topic": ["t"] * 3,
            "partition": [0] * 3,
            "offset": [7, 8, 9],
        }
    )
    (out,) = list(make_kafka_classifier(300_000)(iter([frame])))
    assert list(out.group_key == ingest.DEAD_LETTER_KEY) == [False, True, False]
    assert out.reason[1].startswith("internal error: RuntimeError")


def test_stateful_step_failure_dead_letters_one_event_and_applies_the_rest(monkeypatch):
    lines = fixture_lines("02_master_and_slave")
    events = [parse_event(line) for line in lines]
    group = events[0].brokerName
    real_apply = clock_module.apply_event

    def apply(routes, event, flags):
        if event.brokerId == 1:
            raise RuntimeError("injected failure")
        real_apply(routes, event, flags)

    monkeypatch.setattr(clock_module, "apply_event", apply)
    rows = [
        (e.eventTime, "t-0", n, pack_event(e))
        for n, e in enumerate(events)
        if e.brokerName == group
    ]
    out = run_step(rows, group_state(), watermark=max(e.eventTime for e in events))
    dead = out[out.kind == "dead"]
    poisoned = [n for n, e in enumerate(events) if e.brokerName == group and e.brokerId == 1]
    assert poisoned
    assert sorted(json.loads(r)["position"] for r in dead.row_json) == poisoned
    assert all(
        json.loads(r)["reason"] == "internal error: RuntimeError: injected failure"
        for r in dead.row_json
    )
    assert set(dead.table) == {DEAD_LETTER}
    stats = json.loads(out[out.kind == "stats"].row_json.iloc[0])
    others = out[out.kind != "stats"]  # the stats row tells the writer where they go
    writes = {f"{k}/{t}" for k, t in zip(others.kind, others.table, strict=True)}
    assert stats["writes"] == sorted(writes)
    assert stats["failed_in_step"] == len(poisoned)
    assert stats["applied"] == len(rows) - len(poisoned)
    assert (out.kind == "change").any()  # the master's events still changed the tables


# ---- archives from the future ------------------------------------------------------------------


def test_backfill_dead_letters_lines_past_its_wall_clock_plus_the_skew(tmp_path):
    """Stage one of a backfill: a line more than max_future_skew_ms ahead of the wall clock is a
    dead letter whose reason says so (on the known-records fast path too); None trusts it."""
    import time

    skew = 300_000
    heartbeat = json.loads(
        next(line for line in fixture_lines("06_lightweight_heartbeat") if '"HEARTBEAT"' in line)
    )

    def line(event_time: int) -> bytes:
        return json.dumps(dict(heartbeat, eventTime=event_time)).encode() + b"\n"

    def classified(content: bytes, max_future_skew_ms: int | None) -> pd.DataFrame:
        frame = _archive_frame(tmp_path, content)
        return pd.concat(list(_classify_archives(iter([frame]), None, max_future_skew_ms)))

    before = int(time.time() * 1000)
    # twice each: the second of a pair takes the known-records fast path
    content = line(before + skew) * 2 + line(before + 10 * skew) * 2 + line(MAX_EVENT_TIME_MS)
    rows = classified(content, skew)
    after = int(time.time() * 1000)
    assert list(rows.reason.isna()) == [True, True, False, False, False]
    future_times = [before + 10 * skew] * 2 + [MAX_EVENT_TIME_MS]
    for reason, event_time in zip(rows.reason[2:], future_times, strict=True):
        prefix = f"eventTime {event_time} is more than {skew} ms ahead of the backfill's wall clock"
        assert reason.startswith(prefix)
        now_ms = int(reason.removeprefix(prefix).split()[0])
        assert before <= now_ms <= after
        assert reason.endswith(
            "(an archive from the future? synthetic archives: "
            "routectl backfill --allow-future-events)"
        )
    assert set(rows.group_key[2:]) == {ingest.DEAD_LETTER_KEY}
    assert list(rows.event_time[2:]) == [0, 0, 0]  # dead letters never move the watermark

    trusted = classified(content, None)
    assert trusted.reason.isna().all()
    assert trusted.event_time.iloc[-1] == MAX_EVENT_TIME_MS


def test_streaming_skew_reason_is_unchanged():
    assert ingest.skew_reason(5, 1, 3, ingest.JOB_CLOCK) == (
        "eventTime 5 is more than 3 ms ahead of the job clock 1 (clock skew)"
    )
