"""Archives from the future: a backfill dead-letters lines dated more than max_future_skew_ms
ahead of its wall clock (one bad line must not expire the fleet), unless told to trust them
(synthetic archives), on real Spark and Delta."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from routing_lib.core.dump import project
from routing_lib.core.tables import DEAD_LETTER
from routing_lib.read.warehouse import load_snapshot
from schemas.route_event import MAX_EVENT_TIME_MS
from tests.support.helpers import fixture_lines, reference_dump

pytestmark = pytest.mark.spark

FIXTURE = "20_random_fleet_seed101"
YEAR_9999_MS = MAX_EVENT_TIME_MS - 1000  # inside the schema's range: only the clock refuses it


def _archive_with_future_line(tmp_path) -> tuple[list[str], int]:
    """The fixture with one broker's HEARTBEAT re-dated to year 9999 inserted mid-way; returns
    the lines and the future line's line number."""
    lines = fixture_lines(FIXTURE)
    heartbeat = json.loads(next(line for line in lines if '"HEARTBEAT"' in line))
    future = json.dumps(dict(heartbeat, eventTime=YEAR_9999_MS), separators=(",", ":"))
    at = len(lines) // 2
    lines = [*lines[:at], future, *lines[at:]]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "events.jsonl").write_text("".join(line + "\n" for line in lines))
    return lines, at + 1


def _dead_letters(warehouse) -> list[dict]:
    return DeltaTable(str(warehouse / DEAD_LETTER)).to_pyarrow_table().to_pylist()


def test_a_line_from_year_9999_is_dead_lettered_and_the_fleet_lives(backfill, config, tmp_path):
    assert not config.routes.backfill_allow_future_events  # the check is on by default
    lines, future_line = _archive_with_future_line(tmp_path)
    others = [line for n, line in enumerate(lines, start=1) if n != future_line]

    dump = backfill([tmp_path / "in"])

    assert dump == reference_dump(others)
    assert dump["brokerLiveTable"]  # the brokers the other lines keep alive are alive
    [dead] = _dead_letters(backfill.warehouse)
    assert dead["position"] == future_line
    assert dead["source"].endswith("events.jsonl")
    assert dead["raw_text"] == lines[future_line - 1]
    reason = dead["reason"]
    assert f"eventTime {YEAR_9999_MS} is more than {config.routes.max_future_skew_ms} ms" in reason
    assert "ahead of the backfill's wall clock" in reason
    assert "--allow-future-events" in reason


def test_allowing_future_events_in_config_trusts_every_line(spark, config, tmp_path):
    from routing_lib.jobs.backfill import run_backfill

    lines, _ = _archive_with_future_line(tmp_path)
    trusting = config.with_overrides("routes", backfill_allow_future_events=True)
    warehouse = tmp_path / "warehouse"
    run_backfill(trusting, [str(tmp_path / "in")], str(warehouse), spark=spark)

    dump = project(load_snapshot(warehouse).dump())
    assert dump == reference_dump(lines)  # as before the check: the year-9999 watermark
    assert dump["brokerLiveTable"] == []  # ... expired every broker
    assert _dead_letters(warehouse) == []


def test_routectl_backfill_allow_future_events_flag(spark, config, tmp_path):
    """The flag reaches the backfill (routectl in this process: its Spark session is reused)."""
    from routing_lib.cli import main

    lines, _ = _archive_with_future_line(tmp_path)
    warehouse = tmp_path / "warehouse"
    argv = ["backfill", "--input", str(tmp_path / "in"), "--warehouse", str(warehouse)]
    assert main([*argv, "--allow-future-events"]) == 0
    assert project(load_snapshot(warehouse).dump()) == reference_dump(lines)
    assert _dead_letters(warehouse) == []
