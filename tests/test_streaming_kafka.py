"""The streaming job against the real local Kafka broker: golden fixtures, many micro-batches,
crashes, late events, clock skew, malformed values, huge registrations."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from routing_lib.content_gc import collect_content, loadable_from
from routing_lib.core.content import CONTENT
from routing_lib.core.dump import project
from routing_lib.core.tables import (
    DEAD_LETTER,
    LATE_EVENT,
    PROGRESS,
    ROUTE_TABLES,
    TABLE_KEYS,
)
from routing_lib.read.warehouse import load_snapshot
from tests.support.fault_support import wait_for
from tests.support.helpers import FIXTURES, GOLDEN, expected_dump, fixture_lines
from tests.support.job_commands import run_args
from tests.support.kafka_support import lines_of, produce, rows

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_through_kafka(name, job):
    produce(job.bootstrap, job.topic, lines_of(name))
    assert job() == expected_dump(name)


def test_tiny_micro_batches_give_the_same_tables(job):
    name = "20_random_fleet_seed101"
    produce(job.bootstrap, job.topic, lines_of(name))
    assert job(max_offsets_per_trigger=60) == expected_dump(name)
    progress = rows(job.warehouse, PROGRESS)
    assert len(progress) >= 549 // 60
    assert sum(r["input_rows"] for r in progress) == 549
    assert sum(r["late"] for r in progress) == 0


def test_late_event_goes_to_the_late_table(job):
    name = "04_expiry_default_120s"
    produce(job.bootstrap, job.topic, lines_of(name))
    before = job()
    watermark = before["watermark"]
    late = json.loads(fixture_lines(name)[-1])
    late.update(eventTime=watermark - 60_000, brokerName="broker-late", brokerAddr="10.7.7.7:1")
    produce(job.bootstrap, job.topic, [json.dumps(late).encode()])
    listeners = _listener_count()
    after = job()
    assert after == before  # not applied
    assert _listener_count() == listeners  # the run took its progress listener away
    late_rows = rows(job.warehouse, LATE_EVENT)
    assert [(r["broker_name"], r["event_time"], r["published_watermark"]) for r in late_rows] == [
        ("broker-late", watermark - 60_000, watermark)
    ]
    assert late_rows[0]["source"].startswith(job.topic + "-")
    assert sum(r["late"] for r in rows(job.warehouse, PROGRESS)) == 1


def _listener_count() -> int:
    """Streaming listeners on the session the in-process jobs share."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    assert session is not None
    return len(session._jsparkSession.streams().listListeners())


def test_far_future_event_is_dead_lettered_and_expires_nobody(job):
    now = int(time.time() * 1000)
    register, _, clock = (json.loads(line) for line in fixture_lines("01_master_registers"))
    events = [
        dict(register, eventTime=now - 60_000),
        dict(clock, eventTime=now - 30_000),
        dict(register, eventTime=now + 3_600_000, brokerName="skewed", brokerAddr="10.6.6.6:1"),
    ]
    produce(job.bootstrap, job.topic, [json.dumps(e).encode() for e in events])
    dump = job()
    assert dump["watermark"] == now - 40_000  # the skewed clock did not move it
    assert [b["brokerAddr"] for b in dump["brokerLiveTable"]] == [register["brokerAddr"]]
    dead = rows(job.warehouse, DEAD_LETTER)
    assert len(dead) == 1 and "clock skew" in dead[0]["reason"]


def test_malformed_values_are_dead_lettered_with_partition_and_offset(job):
    good = lines_of("01_master_registers")
    bad = [b"not json", b"\x00\xff\xfe binary", b"", b'{"eventType": "REGISTER"}']
    produce(job.bootstrap, job.topic, bad + good, keys=[b"k"] * len(bad) + [None] * len(good))
    assert job() == expected_dump("01_master_registers")
    dead = rows(job.warehouse, DEAD_LETTER)
    assert sorted(r["raw"] for r in dead) == sorted(bad)
    partitions = {r["source"] for r in dead}
    assert len(partitions) == 1 and partitions.pop().startswith(job.topic + "-")
    assert sorted(r["position"] for r in dead) == [0, 1, 2, 3]  # offsets in that partition
    assert all(r["reason"] for r in dead)


def _start_job(job, *extra: str, log: Path | None = None, **settings: str) -> subprocess.Popen:
    """`routectl run` as a process of its own; `settings` are environment overrides
    (ROUTELAKE_<SECTION>_<KEY>), its output goes to `log` if given."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, **settings)
    with open(log or os.devnull, "ab") as output:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "routing_lib.cli",
                *run_args(job.bootstrap, job.topic, job.warehouse, job.checkpoint, *extra),
            ],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def _wait_for_batches(job, count: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if len(rows(job.warehouse, PROGRESS)) >= count:
                return
        except Exception:  # the table does not exist yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"the job did not publish {count} batches in {timeout_s} s")


# Every value goes through the content store and the job collects it after every batch, with
# the shortest grace period allowed: with every content file made older than that before each
# restart, only the mark (the references in the retained state versions) keeps a file. Spark
# keeps 2 state versions (and drops older ones every second), so values that earlier versions
# alone named become garbage.
CONTENT_COLLECTED_EVERY_BATCH = {
    "ROUTELAKE_SPARK_CONTENT_MIN_CHARS": "1",
    "ROUTELAKE_SPARK_CONTENT_GC_EVERY_BATCHES": "1",
    "ROUTELAKE_SPARK_CONTENT_GC_GRACE_S": str(2 * CONTENT.freshness_s),
    "SPARK_SUBMIT_OPTS": " ".join(
        [
            os.environ.get("SPARK_SUBMIT_OPTS", ""),
            "-Dspark.sql.streaming.minBatchesToRetain=2",
            "-Dspark.sql.streaming.stateStore.maintenanceInterval=1s",
        ]
    ),
}
COLLECTION_LINE = re.compile(r"content: .*; deleted (\d+) files")
# A reference (the marker character, then the digest) in a state value as json.dumps shows it,
# the marker escaped once or more (a pending event's packed form sits inside another value)
REFERENCE_IN_JSON = re.compile(r"(?:u001d|\\x1d)([0-9a-f]{32})")


def _age_files(folder: Path, seconds: float) -> set[str]:
    """Every file under folder last written `seconds` ago; their names."""
    aged = set()
    for path in folder.rglob("*"):
        if path.is_file():
            os.utime(path, (time.time() - seconds,) * 2)
            aged.add(path.name)
    return aged


def _collections(log: Path) -> list[int]:
    """How many files each content collection logged in `log` deleted."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [int(m[1]) for m in COLLECTION_LINE.finditer(text)]


def test_killed_job_restarts_from_checkpoint_without_duplicates(job, spark, tmp_path):
    """Three runs, each SIGKILLed mid-stream, then an --available-now run: the tables equal the
    replay, nothing twice. The killed runs keep every value as a content reference and collect
    the content store after every batch, every content file aged past the grace period before
    each restart; before the last run a collection with every file aged: a collection ran in
    each killed run, collections deleted files, and every reference a retained state version
    holds still has its file."""
    name = "20_random_fleet_seed202"
    lines = lines_of(name)
    thirds = [
        lines[: len(lines) // 3],
        lines[len(lines) // 3 : 2 * len(lines) // 3],
        lines[2 * len(lines) // 3 :],
    ]
    content = job.checkpoint / "content"
    aged: set[str] = set()
    logs = [tmp_path / f"run-{i}.log" for i in range(len(thirds))]
    batches_seen = 0
    for part, log in zip(thirds, logs, strict=True):
        produce(job.bootstrap, job.topic, part)
        aged |= _age_files(content, 5 * 3600)
        process = _start_job(
            job,
            "--verbose",
            "--max-offsets-per-trigger",
            "150",
            "--trigger-interval",
            "1 second",
            log=log,
            **CONTENT_COLLECTED_EVERY_BATCH,
        )
        batches_seen += 2
        try:
            _wait_for_batches(job, batches_seen)
            wait_for(lambda log=log: bool(_collections(log)), 120, f"a collection in {log}")
        finally:
            process.send_signal(signal.SIGKILL)  # mid-stream, no clean shutdown
            process.wait(30)
    # Between runs (as `routectl housekeeping --content` would) with every file aged: nothing
    # is fresh, so the mark alone keeps what the state names; the last run then reads it.
    aged |= _age_files(content, 5 * 3600)
    between = collect_content(spark, str(job.checkpoint), CONTENT.freshness_s * 2)
    assert job() == expected_dump(name)
    for table in ROUTE_TABLES:
        keys = [tuple(r[k] for k in TABLE_KEYS[table]) for r in rows(job.warehouse, table)]
        assert len(keys) == len(set(keys)), f"duplicate rows in {table}"
    progress = rows(job.warehouse, PROGRESS)
    batch_ids = [r["batch_id"] for r in progress]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was published twice"
    assert sum(r["input_rows"] for r in progress) == len(lines)

    on_disk = {p.name for p in content.rglob("*") if p.is_file()}
    in_runs = sum(sum(_collections(log)) for log in logs)
    assert in_runs > 0 and between.deleted_files > 0, "collections deleted nothing"
    assert aged - on_disk, "none of the aged files was deleted"
    referenced = _referenced_by_every_state_version(spark, job.checkpoint)
    assert referenced, "the state holds content references"
    assert referenced <= on_disk, f"referenced by state, no file: {sorted(referenced - on_disk)}"


def _referenced_by_every_state_version(spark, checkpoint: Path) -> set[str]:
    """The digests every state version Spark can still load names, each version read in full
    (not as the collector reads them: the oldest in full and the later ones' changes)."""
    found: set[str] = set()
    location = str(checkpoint)
    oldest = loadable_from(location)  # older versions have no offset log: none can load them
    for operator in spark.read.format("state-metadata").load(location).collect():
        for version in range(max(operator["minBatchId"], oldest), operator["maxBatchId"] + 1):
            state = (
                spark.read.format("statestore")
                .option("operatorId", operator["operatorId"])
                .option("batchId", version)
                .load(location)
            )
            for row in state.select("value").collect():
                text = json.dumps(row.asDict(recursive=True), default=repr)
                found.update(REFERENCE_IN_JSON.findall(text))
    return found


def test_available_now_via_cli_on_golden_fixture(job):
    name = "08_role_switch"
    produce(job.bootstrap, job.topic, lines_of(name))
    process = _start_job(job, "--available-now")
    assert process.wait(180) == 0
    assert project(load_snapshot(job.warehouse).dump()) == expected_dump(name)


def test_streaming_and_backfill_write_identical_history(job, config, spark, tmp_path):
    from routing_lib.core.history import ADMIN_EVENTS, HISTORY_TABLES
    from routing_lib.jobs.backfill import run_backfill
    from routing_lib.read.history import load_history

    name = "20_random_fleet_seed101"
    produce(job.bootstrap, job.topic, lines_of(name))
    streamed = job(max_offsets_per_trigger=200)
    backfilled = tmp_path / "backfilled"
    run_backfill(config, [str(GOLDEN / name / "events.jsonl")], str(backfilled), spark=spark)
    assert project(load_snapshot(backfilled).dump()) == streamed
    from_stream, from_backfill = load_history(job.warehouse), load_history(backfilled)
    for table in HISTORY_TABLES:
        assert from_stream[table] or table == ADMIN_EVENTS, table  # no admin events here
        assert _canonical(from_stream[table]) == _canonical(from_backfill[table]), table


def _canonical(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


def test_integer_range_records_do_not_stop_the_stream(job):
    """Out-of-range integers are dead letters; the job passes their offsets and keeps
    applying what follows, in this run and the next."""
    from tests.support.bad_records import INTEGER_RANGE_RECORDS

    bad = [raw for _, raw, _ in INTEGER_RANGE_RECORDS]
    first, rest = lines_of("02_master_and_slave")[:2], lines_of("02_master_and_slave")[2:]
    produce(job.bootstrap, job.topic, first + bad, keys=[None] * (len(first) + len(bad)))
    job()
    dead = rows(job.warehouse, DEAD_LETTER)
    assert sorted(r["position"] for r in dead) == list(range(2, 2 + len(bad)))
    assert sorted(r["raw"] for r in dead) == sorted(bad)
    produce(job.bootstrap, job.topic, rest)
    assert job() == expected_dump("02_master_and_slave")
    progress = rows(job.warehouse, PROGRESS)
    assert sum(r["input_rows"] for r in progress) == len(first) + len(bad) + len(rest)
    assert sum(r["dead_lettered"] for r in progress) == len(bad)


def test_ticks_move_the_watermark_and_late_ticks_are_dropped_not_late_tabled(job):
    name = "13_tick_expires_silent_fleet"
    produce(job.bootstrap, job.topic, lines_of(name))
    dump = job()
    assert dump == expected_dump(name)
    old_tick = {"eventType": "TICK", "eventTime": dump["watermark"] - 50_000, "source": "c2"}
    produce(job.bootstrap, job.topic, [json.dumps(old_tick).encode()])
    assert job() == dump
    assert rows(job.warehouse, LATE_EVENT) == []
    progress = rows(job.warehouse, PROGRESS)
    total = len(lines_of(name)) + 1
    assert sum(r["input_rows"] for r in progress) == total  # every TICK counted
    assert sum(r["accepted"] + r["late"] + r["dead_lettered"] for r in progress) == total
