"""History tables written by the Spark job: as-of from Delta equals State(T)."""

from __future__ import annotations

import json
import random

import pytest

from routing_lib.cli import main
from routing_lib.core.as_of import as_of_view
from routing_lib.core.history import HISTORY_TABLES
from routing_lib.core.replay import replay_dump
from routing_lib.read.history import as_of_dump, load_history, topic_history
from routing_lib.read.warehouse import WarehouseError
from schemas import parse_event
from tests.support.helpers import GOLDEN, fixture_lines, reference_dump, split_lines, write_files

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    "name", ["08_role_switch", "11_acting_master_perm_wipe", "20_random_fleet_seed101"]
)
def test_as_of_from_delta_history_equals_state_at_t(name, backfill, tmp_path):
    assert_as_of_equals_the_replay(name, backfill, tmp_path)


def test_a_closed_connection_in_the_history_and_its_cli(backfill, tmp_path, capsys):
    """Golden 18 (connections): as-of from the history tables equals State(T) around each
    close, and `routectl history broker` names CHANNEL_CLOSED as the removal's cause."""
    assert_as_of_equals_the_replay("18_channel_close", backfill, tmp_path)
    assert main(["history", "broker", "broker-b", "--warehouse", str(backfill.warehouse)]) == 0
    shown = json.loads(capsys.readouterr().out)
    left = [e for e in shown["liveness"] if e["event_type"] != "REGISTERED"]
    assert [(e["broker_addr"], e["event_type"], e["event_time"]) for e in left] == [
        ("10.0.1.1:10911", "CHANNEL_CLOSED", 1_764_000_012_000)  # its second connection's close
    ]
    (member,) = shown["membership"]
    assert (member["end_reason"], member["end_event"], member["valid_to"]) == (
        "CHANNEL_CLOSED",
        "CHANNEL_CLOSED",
        1_764_000_012_000,
    )


def assert_as_of_equals_the_replay(name, backfill, tmp_path) -> None:
    """The fixture in 4 files, one per micro-batch: the tables equal the replay's, and as-of
    from the history tables equals State(T) at sampled event times and one ms around them."""
    lines = fixture_lines(name)
    events = [parse_event(line) for line in lines]
    write_files(tmp_path / "in", split_lines(lines, 4, random.Random(1)))
    dump = backfill([tmp_path / "in"], max_files_per_trigger=1)
    assert dump == reference_dump(lines)
    rng = random.Random(2)
    times = sorted({e.eventTime for e in events if e.eventTime <= dump["watermark"]})
    probes = set(rng.sample(times, min(15, len(times))))
    probes |= {t + d for t in list(probes) for d in (-1, 1)} | {dump["watermark"]}
    for t in sorted(p for p in probes if p <= dump["watermark"]):
        assert as_of_dump(backfill.warehouse, t) == as_of_view(replay_dump(events, t)), t


def test_as_of_refuses_times_past_the_watermark(backfill, capsys):
    dump = backfill([GOLDEN / "04_expiry_default_120s" / "events.jsonl"])
    with pytest.raises(WarehouseError):
        as_of_dump(backfill.warehouse, dump["watermark"] + 1)
    assert (
        main(["as-of", "--warehouse", str(backfill.warehouse), "--at", str(dump["watermark"] + 1)])
        == 1
    )
    assert "watermark" in capsys.readouterr().err


def test_history_rows_do_not_depend_on_batch_boundaries(backfill, tmp_path, spark, config):
    from routing_lib.jobs.backfill import run_backfill

    name = "20_random_fleet_seed202"
    lines = fixture_lines(name)
    one = backfill([GOLDEN / name / "events.jsonl"])
    write_files(tmp_path / "split", split_lines(lines, 7, random.Random(4)))
    other = tmp_path / "other-warehouse"
    run_backfill(
        config, [str(tmp_path / "split")], str(other), spark=spark, max_files_per_trigger=1
    )
    first, second = load_history(backfill.warehouse), load_history(other)
    for table in HISTORY_TABLES:
        assert _sorted(first[table]) == _sorted(second[table]), table
    assert one["watermark"] is not None


def test_topic_history_cli(backfill, capsys):
    backfill([GOLDEN / "07_data_version_gates_topic_updates" / "events.jsonl"])
    rows = topic_history(backfill.warehouse, "Orders")
    assert rows and all(r["topic"] == "Orders" for r in rows)
    assert [r["valid_to"] for r in rows][-1] is None  # the current version is open
    assert main(["history", "topic", "Orders", "--warehouse", str(backfill.warehouse)]) == 0
    assert '"Orders"' in capsys.readouterr().out


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(sorted((k, str(v)) for k, v in r.items())) for r in rows)
