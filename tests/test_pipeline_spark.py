"""Spark pipeline behaviours beyond the fixtures: bad input, huge registrations, replays."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from routing_lib.core.catalog import STORED
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
    change data feed on; a derived one (topic_route_history, issue 36) is not stored."""
    assert not (warehouse / "topic_route_history").exists()
    for spec in STORED:
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


def test_state_timeouts_fire_at_the_watermark_of_their_deadline_not_before(backfill, tmp_path):
    """Spark's event-time timeouts at their edges (routing_lib/spark/watermark.py): three
    brokers, one group each, whose expiry deadlines D (the first watermark with lastUpdate +
    timeout < W) are W - 1, W and W + 1 for the watermark W of one micro-batch. That batch
    expires the first two and publishes W; the next one, at W + 1, the third. Files are read one
    per micro-batch, so the job's watermark steps through W - 2, W, W + 1."""
    from tests.support.helpers import register_record

    delay, timeout, w = 10_000, 30_000, 1_764_000_100_000
    registers = []
    for n, deadline in enumerate((w - 1, w, w + 1)):
        last_update = deadline - timeout - 1  # expired once lastUpdate + timeout < watermark
        record = register_record(last_update, "C", f"10.0.0.{n}", f"broker-{n}", f"topic-{n}")
        registers.append(dict(record, heartbeatTimeoutMillis=timeout))
    files = [
        [*registers, {"eventType": "TICK", "eventTime": w - 2 + delay}],
        [{"eventType": "TICK", "eventTime": w + delay}],
        [{"eventType": "TICK", "eventTime": w + 1 + delay}],
    ]
    archive = tmp_path / "archive"  # one folder: one source, one file per micro-batch
    archive.mkdir()
    for n, records in enumerate(files):
        path = archive / f"part-{n}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))  # read in this order

    dump = backfill([archive], max_files_per_trigger=1)

    progress = sorted(rows(backfill.warehouse, PROGRESS), key=lambda r: r["batch_id"])
    expired_at = {r["watermark"]: r["expired"] for r in progress if r["expired"]}
    assert expired_at == {w: 2, w + 1: 1}, [(r["watermark"], r["expired"]) for r in progress]
    assert [r["watermark"] for r in progress][-3:] == [w - 2, w, w + 1]
    assert dump["brokerLiveTable"] == []


def test_the_writers_merge_at_its_edges_through_spark(spark, tmp_path):
    """The route-table and history-interval MERGEs (delta_writer._merge_clauses) fed by a
    Spark batch through the job's foreachBatch writer, at the edges the stream model
    (tests/support/stream_model.py) takes for granted: a delete of a present and of an absent
    key, an upsert of a present and of an absent key, a null key column matched null-safely;
    an interval closed (its close columns only), a close of no interval (nothing inserted), a
    second interval of the same key from a later valid_from. And the group layout (issue 36):
    topic_queue_table derived from topic_base and topic_overlay after they are committed."""
    from routing_lib.core.catalog import (
        CLUSTER_MEMBERSHIP_HISTORY,
        KV_CONFIG,
        TOPIC_BASE,
        TOPIC_OVERLAY,
    )
    from routing_lib.spark.delta_writer import DeltaRouteWriter, ensure_tables
    from routing_lib.spark.stateful import OUTPUT_SCHEMA

    warehouse = tmp_path / "warehouse"
    ensure_tables(str(warehouse))
    writer = DeltaRouteWriter(str(warehouse), "merge-edges", lambda batch_id: batch_id)

    def kv(namespace: str, key: str | None, value: str | None) -> dict:
        return {"namespace": namespace, "key": key, "value": value}

    def queue(topic: str, perm: int) -> dict:
        return {
            "topic": topic,
            "broker_name": "b1",
            "read_queue_nums": 4,
            "write_queue_nums": 4,
            "perm": perm,
            "topic_sys_flag": 0,
        }

    def overlay(perm_op: str) -> dict:
        return {"broker_name": "b1", "present": True, "perm_op": perm_op, "covered": None}

    def interval(cluster: str, start: int, end: int | None, reason: str) -> dict:
        closed = end is not None
        return {
            "cluster_name": cluster,
            "broker_name": "b1",
            "valid_from": start,
            "valid_to": end,
            "start_reason": reason,
            "start_event": "REGISTER",
            "start_broker_addr": "10.0.0.1:10911",
            "end_reason": "GROUP_REMOVED" if closed else None,
            "end_event": "UNREGISTER" if closed else None,
            "end_broker_addr": "10.0.0.1:10911" if closed else None,
            "event_date": "2025-11-24",
        }

    def publish(batch_id: int, changes: list[tuple[str, str, str, list[dict]]]) -> None:
        rows = [(kind, table, op, json.dumps(r), None) for kind, table, op, r in changes]
        writes = sorted({f"{kind}/{table}" for kind, table, _, _ in changes})
        rows.append(("stats", None, None, json.dumps({"writes": writes}), None))
        writer(spark.createDataFrame(rows, OUTPUT_SCHEMA), batch_id)

    change, history = "change", "history"
    publish(
        0,
        [
            (change, KV_CONFIG, "upsert", [kv("ns", "a", "1"), kv("ns", "b", "1")]),
            (change, KV_CONFIG, "upsert", [kv("ns", None, None)]),
            (history, CLUSTER_MEMBERSHIP_HISTORY, "upsert", [interval("c1", 1_000, None, "A")]),
            (change, TOPIC_BASE, "upsert", [queue("a", 6), queue("b", 6)]),
            (change, TOPIC_OVERLAY, "upsert", [overlay("ID")]),
        ],
    )
    publish(
        1,
        [
            (change, KV_CONFIG, "delete", [kv("ns", "a", None), kv("ns9", "z", None)]),
            (change, KV_CONFIG, "upsert", [kv("ns", "b", "2"), kv("ns", "d", "1")]),
            (change, KV_CONFIG, "upsert", [kv("ns", None, "x")]),
            (history, CLUSTER_MEMBERSHIP_HISTORY, "close", [interval("c1", 1_000, 5_000, "B")]),
            (history, CLUSTER_MEMBERSHIP_HISTORY, "close", [interval("c9", 1_000, 5_000, "A")]),
            (history, CLUSTER_MEMBERSHIP_HISTORY, "upsert", [interval("c1", 7_000, None, "C")]),
            (change, TOPIC_OVERLAY, "upsert", [overlay("WIPE")]),
        ],
    )

    entries = sorted(
        (r["namespace"], r["key"] or "", r["value"] or "") for r in rows(warehouse, KV_CONFIG)
    )
    assert entries == [("ns", "", "x"), ("ns", "b", "2"), ("ns", "d", "1")]  # one row per key
    intervals = sorted(
        (r["cluster_name"], r["valid_from"], r["valid_to"], r["end_reason"], r["start_reason"])
        for r in rows(warehouse, CLUSTER_MEMBERSHIP_HISTORY)
    )
    # the close sets valid_to and how it ended; the interval's values stay the opening ones
    assert intervals == [("c1", 1_000, 5_000, "GROUP_REMOVED", "A"), ("c1", 7_000, None, None, "C")]
    # the overlay's WIPE applied to the base rows: the group's partition derived again
    queues = sorted((r["topic"], r["broker_name"], r["perm"]) for r in rows(warehouse, TOPIC_QUEUE))
    assert queues == [("a", "b1", 4), ("b", "b1", 4)]
    assert len(rows(warehouse, TOPIC_BASE)) == 2


def test_the_marks_reference_patterns_run_as_spark_runs_them(spark):
    """The collector's mark runs DIGEST_IN_TEXT and MANIFEST_IN_TEXT as Java regexes in
    Spark's regexp_extract_all over to_json of each state value: references in a column, in a
    pending event's packed form inside the clock's JSON (escaped twice), with upper-case hex
    escapes, plain and chunked; near misses (a short digest, upper-case hex) found by neither."""
    from pyspark.sql import functions as F

    from routing_lib.content_gc import DIGEST_IN_TEXT, MANIFEST_IN_TEXT
    from routing_lib.core.content import MANIFEST_MARK, REF_MARK, content_digest

    plain, pending, chunked, nested = (content_digest(t.encode()) for t in "abcd")
    clock = json.dumps(
        {
            "pending": [["f", 1, '{"eventType":"REGISTER"}\x1e' + REF_MARK + pending]],
            "chunked": MANIFEST_MARK + nested,
        }
    )
    misses = REF_MARK + plain[:31] + " " + MANIFEST_MARK + plain.upper()
    frame = spark.createDataFrame(
        [(REF_MARK + plain, clock, MANIFEST_MARK + chunked, misses)],
        "topics string, clock string, history string, other string",
    )
    text = F.to_json(F.struct(*frame.columns))  # as the mark reads a state value

    def found(pattern: str) -> set[str]:
        rows = frame.select(F.explode(F.regexp_extract_all(text, F.lit(pattern), 1))).collect()
        return {row[0] for row in rows}

    assert found(DIGEST_IN_TEXT) == {plain, pending, chunked, nested}
    assert found(MANIFEST_IN_TEXT) == {chunked, nested}


def test_the_content_collection_runs_beside_the_query_loop_and_a_stop_does_not_wait(
    spark, config, tmp_path
):
    """routing_lib/jobs/route_state.py: a due collection runs on a thread of its own (the
    loop that sees SIGTERM never runs one); a stop waits for one in flight at most
    STOP_WAIT_S; a run that caught up runs a collection still due when it ends."""
    import threading
    import time

    from routing_lib.jobs.route_state import ContentCollection
    from routing_lib.metrics import JobMetrics

    class Recorded(ContentCollection):
        STOP_WAIT_S = 0.5

        def __init__(self, hold: threading.Event) -> None:
            cfg = config.with_overrides("spark", content_gc_every_batches=2)
            super().__init__(spark, str(tmp_path / "checkpoint"), cfg, JobMetrics())
            self.hold, self.started = hold, threading.Event()
            self.threads: list[str] = []

        def collect(self) -> None:  # the collection's own work is test_content_refs_spark's
            self.threads.append(threading.current_thread().name)
            self.started.set()
            self.hold.wait(30)

    stuck = Recorded(hold=threading.Event())
    stuck.batch_published()
    assert not stuck.started.wait(0.5)  # one batch of two: not due
    stuck.batch_published()
    assert stuck.started.wait(10) and stuck.threads == ["content-gc"]
    began = time.monotonic()
    stuck.close(finish_due=False)  # a stop while it runs
    assert time.monotonic() - began < 5
    stuck.hold.set()

    caught_up = Recorded(hold=threading.Event())
    caught_up.hold.set()
    caught_up.published = 1
    caught_up.close(finish_due=True)  # nothing due: nothing run
    assert caught_up.threads == []
    caught_up = Recorded(hold=threading.Event())
    caught_up.hold.set()
    caught_up._closed.set()  # its thread ends at the next wake-up, before running anything
    caught_up.batch_published()
    caught_up.batch_published()
    caught_up.close(finish_due=True)
    assert caught_up.threads == [threading.current_thread().name]  # run by the caller, at the end


def _as_written_before_the_lead(checkpoint: Path) -> None:
    """A checkpoint as a version from before Spark's watermark ran SPARK_LEAD_MS ahead wrote
    it: Spark's watermarks in the offset and commit logs were the job's, and no lead file."""
    from routing_lib.spark.checkpoint import LEAD_FILE

    for log_name, key in (("offsets", "batchWatermarkMs"), ("commits", "nextBatchWatermarkMs")):
        for path in (checkpoint / log_name).iterdir():
            if path.name.endswith(".crc"):  # Hadoop's checksum of the old bytes
                path.unlink()
            if not path.name.isdigit():
                continue
            version, metadata, *rest = path.read_text().split("\n")
            fields = json.loads(metadata)
            if fields.get(key, 0) > 0:
                fields[key] -= 1
            path.write_text("\n".join([version, json.dumps(fields), *rest]))
    (checkpoint / LEAD_FILE).unlink()


def test_a_checkpoint_from_before_the_lead_keeps_its_published_watermark(backfill, tmp_path):
    """issue 37: a checkpoint written before Spark's watermark was computed one ms ahead
    (routing_lib/spark/watermark.py) holds the job's watermark W where this version expects
    W + 1. Read minus 1, the next batch would publish W - 1 and apply an event at exactly W,
    which is late (the tables showed State(W)). The lead file marks where the lead begins."""
    from routing_lib.core.tables import LATE_EVENT
    from routing_lib.spark.checkpoint import ensure_watermark_lead
    from routing_lib.spark.watermark import WatermarkLead
    from tests.support.helpers import register_record

    delay, t = 10_000, 1_764_000_200_000
    archive = tmp_path / "archive"  # one folder, read again with a file more
    archive.mkdir()
    first = [register_record(t, "C", "10.0.0.1", "broker-a", "TopicA")]
    first.append({"eventType": "TICK", "eventTime": t + 5_000 + delay})
    (archive / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    backfill([archive])
    w = t + 5_000
    assert max(r["watermark"] for r in rows(backfill.warehouse, PROGRESS)) == w

    written = backfill.warehouse / "_checkpoints" / "backfill"
    # a checkpoint of the version with the lead but before the lead file: the lead from 0
    with_lead = tmp_path / "with-lead"
    shutil.copytree(written, with_lead)
    (with_lead / "routelake-watermark.json").unlink()
    assert ensure_watermark_lead(str(with_lead), str(backfill.warehouse)) == WatermarkLead()

    old = tmp_path / "old"  # a copy: Python workers keep what they read of a checkpoint
    shutil.copytree(written, old)
    _as_written_before_the_lead(old)
    late = register_record(w, "C", "10.0.0.2", "broker-late", "TopicLate")
    second = [late, {"eventType": "TICK", "eventTime": w + 1 + delay}]
    (archive / "part-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in second))
    published_before = len(rows(backfill.warehouse, PROGRESS))
    dump = backfill([archive], checkpoint=str(old))

    assert [b["brokerAddr"] for b in dump["brokerLiveTable"]] == ["10.0.0.1:10911"]
    assert [r["event_time"] for r in rows(backfill.warehouse, LATE_EVENT)] == [w]
    progress = sorted(rows(backfill.warehouse, PROGRESS), key=lambda r: r["committed_at_ms"])
    watermarks = [r["watermark"] for r in progress[published_before:]]
    assert min(watermarks) == w and watermarks[-1] == w + 1, watermarks  # never back to w - 1
