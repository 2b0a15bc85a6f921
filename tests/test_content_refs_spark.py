"""Content references through real Spark, Delta and Kafka: with every topic table and large
state value stored as a reference (content_min_chars = 0), the backfill and the streaming job
give the same tables as the plain replay, in one-file or tiny micro-batches."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from routing_lib import content_gc, storage
from routing_lib.content_files import ContentFolder, ContentSettings
from routing_lib.content_gc import collect_content, live_digests
from routing_lib.core.catalog import DEAD_LETTER
from routing_lib.core.content import content_ref
from routing_lib.core.dump import project
from routing_lib.ingest import classify
from routing_lib.jobs.backfill import run_backfill
from routing_lib.jobs.route_state import run_route_state
from routing_lib.read.warehouse import load_snapshot
from routing_lib.shared_tables import INDEX_FOLDER
from tests.support.helpers import (
    DELAY_MS,
    expected_dump,
    fixture_lines,
    random_history,
    reference_dump,
    register_record,
    registration_modes,
    split_lines,
    write_files,
)
from tests.support.kafka_support import produce


def _backfill(spark, config, inputs, tmp_path, **kwargs) -> dict:
    warehouse = tmp_path / "warehouse"
    run_backfill(
        config.with_overrides("spark", content_min_chars=0),
        [str(p) for p in inputs],
        str(warehouse),
        checkpoint=str(tmp_path / "checkpoint"),
        spark=spark,
        **kwargs,
    )
    return project(load_snapshot(warehouse).dump())


@pytest.mark.spark
def test_split_registrations_as_references_in_one_file_batches_equal_replay(
    spark, config, tmp_path
):
    rng = random.Random(5)
    lines = [json.dumps(r) for r in registration_modes(random_history(5, rng), rng)]
    lines += fixture_lines("17_split_registration")  # other brokers, same archive
    write_files(tmp_path / "in", split_lines(lines, 5, rng))
    dump = _backfill(spark, config, [tmp_path / "in"], tmp_path, max_files_per_trigger=1)
    assert dump == reference_dump(lines)
    stored = [p for p in (tmp_path / "checkpoint" / "content").rglob("*") if p.is_file()]
    assert stored, "the topic tables went through the content store"


@pytest.mark.spark
def test_golden_split_registration_backfill_with_references(spark, config, tmp_path, monkeypatch):
    """Then the content collector runs on the checkpoint with every file made older than its
    grace period, beside a file no state names: that one goes, every file a retained state
    version names (pending registrations' tables included) stays, and a second backfill over
    more input (the same tables re-sent later) still equals the replay. Beside the fixture, a
    2 000-topic group whose tables are chunked (manifests named by state, their chunks only by
    the manifests): the collector keeps the chunks, the second backfill reads them back."""
    from routing_lib.core.content import MANIFEST_HEADER

    name = "17_split_registration"
    golden = fixture_lines(name)
    lines = golden + _large_group_lines(1_764_000_000_000, 2_000)
    write_files(tmp_path / "in", [lines])
    assert _backfill(spark, config, [tmp_path / "in"], tmp_path) == reference_dump(lines)
    assert reference_dump(golden) == expected_dump(name)

    checkpoint = tmp_path / "checkpoint"
    content = checkpoint / "content"
    stray = content_ref("a table no state version names")
    ContentFolder(str(content)).write(stray, "a table no state version names")
    stored = {p.name for p in content.rglob("*") if p.is_file()}
    for path in content.rglob("*"):
        if path.is_file():
            os.utime(path, (time.time() - 5 * 3600,) * 2)
    manifests = [
        p for p in content.rglob("*") if p.is_file() and p.read_text().startswith(MANIFEST_HEADER)
    ]
    assert manifests, "the large group's tables are chunked"
    # stage one's index of validated tables (routing_lib/shared_tables.py) names no content a
    # state needs: its entries go once past the grace, like the stray file
    index = {p.name for p in (content / INDEX_FOLDER).iterdir()}
    assert index, "the tables stage one validated are in the index"
    report = collect_content(spark, str(checkpoint), 3600)
    # no chunk either: the manifests' lists are marked
    assert sorted(report.deleted) == sorted([stray[1:], *index])
    assert report.marked >= len(stored) - 1 - len(index)  # the pending tables' refs were found
    assert {p.name for p in content.rglob("*") if p.is_file()} == stored - {stray[1:], *index}

    # A job killed between Spark's purge of the offset log (at a commit) and the state
    # store's maintenance leaves state versions older than the offset log, which the state
    # reader refuses (STDS_OFFSET_LOG_UNAVAILABLE): the mark starts at the oldest batch the
    # offset log holds. A copy of the checkpoint without its oldest offset file stands for it.
    marked = live_digests(spark, str(checkpoint))
    crashed = shutil.copytree(checkpoint, tmp_path / "crashed")
    offsets = sorted(int(p.name) for p in (crashed / "offsets").iterdir() if p.name.isdigit())
    assert len(offsets) >= 2
    (crashed / "offsets" / str(offsets[0])).unlink()
    from_newer = live_digests(spark, str(crashed))
    assert from_newer and from_newer <= marked
    # A running job purging that entry between the mark's listing of the offset log and
    # Spark's read of it (the in-job collection runs beside the batches): the first listing
    # still names the purged entry; the mark is taken again and equals the one without race.
    stale = [offsets[0]]
    real_listing = content_gc.loadable_from

    def listing(path: str) -> int:
        return stale.pop() if stale else real_listing(path)

    monkeypatch.setattr(content_gc, "loadable_from", listing)
    assert live_digests(spark, str(crashed)) == from_newer
    assert not stale, "the stale listing was used"

    later = [
        json.dumps({**r, "eventTime": r["eventTime"] + 400_000}) for r in map(json.loads, lines)
    ]
    write_files(tmp_path / "in", [lines, later])
    assert _backfill(spark, config, [tmp_path / "in"], tmp_path) == reference_dump(lines + later)


def _large_group_lines(start: int, topics: int) -> list[str]:
    """A group whose tables are chunked (past the store's 32 KB): registered, expired,
    back with the same table, expired, back with one topic more, still live at the end."""
    names = [f"LargeTopic{i}" for i in range(topics)]

    def register(at: int, counter: int, table_names: list[str], timeout: int) -> str:
        table = {
            n: {"topicName": n, "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}
            for n in table_names
        }
        return json.dumps(
            {
                "eventType": "REGISTER",
                "eventTime": at,
                "clusterName": "CL",
                "brokerAddr": "10.9.0.1:10911",
                "brokerName": "broker-large",
                "brokerId": 0,
                "heartbeatTimeoutMillis": timeout,
                "dataVersion": {"stateVersion": 0, "timestamp": at, "counter": counter},
                "topicConfigTable": table,
            }
        )

    return [
        register(start, 1, names, 30_000),
        register(start + 60_000, 2, names, 30_000),
        register(start + 120_000, 3, [*names, "LargeTopicAdded"], 30_000),
        register(start + 200_000, 4, [*names, "LargeTopicAdded"], 600_000),
    ]


@pytest.mark.kafka
@pytest.mark.spark
def test_split_registrations_through_kafka_with_references_equal_replay(
    spark, config, kafka_bootstrap, topic, tmp_path
):
    """The same kind of history through the streaming job, ~10 micro-batches in two runs (a
    restart between them), the job collecting its content store every 2 batches: an old file
    no state names goes, the tables equal the replay, and every reference a retained state
    version holds still has its file. Then a pending registration's content file gets a
    non-UTF-8 byte: the next run stops with the store's message, nothing dead-lettered."""
    rng = random.Random(8)
    lines = [json.dumps(r) for r in registration_modes(random_history(8, rng), rng)]
    checkpoint = tmp_path / "checkpoint"
    cfg = (
        config.with_overrides("spark", content_min_chars=0, content_gc_every_batches=2)
        .with_overrides("paths", warehouse=str(tmp_path / "warehouse"), checkpoint=str(checkpoint))
        .with_overrides(
            "kafka",
            topic=topic,
            bootstrap_servers=kafka_bootstrap,
            max_offsets_per_trigger=len(lines) // 10 + 1,
        )
    )
    half = len(lines) // 2
    # a broker registering after the history's end: still pending when the second run ends
    last = max(json.loads(line)["eventTime"] for line in lines)
    late = register_record(last + 1000, "C9", "10.0.9.1", "broker-late", "LateTopic")
    lines.append(json.dumps(late))
    produce(kafka_bootstrap, topic, [line.encode() for line in lines[:half]])
    run_route_state(cfg, available_now=True, install_signal_handlers=False)

    content = checkpoint / "content"
    stray = content_ref("a table no state version names, written long ago")
    ContentFolder(str(content)).write(stray, "a table no state version names, written long ago")
    stray_path = content / stray[1:3] / stray[1:]
    os.utime(stray_path, (time.time() - 5 * 3600,) * 2)
    produce(kafka_bootstrap, topic, [line.encode() for line in lines[half:]])
    metrics = run_route_state(cfg, available_now=True, install_signal_handlers=False)

    assert project(load_snapshot(tmp_path / "warehouse").dump()) == reference_dump(lines)
    assert not stray_path.exists(), "the job collected its content store"
    on_disk = {p.name for p in content.rglob("*") if p.is_file()}
    live = live_digests(spark, str(checkpoint))
    assert live and live <= on_disk
    assert 0 < metrics.get("routelake_job_content_files") <= len(on_disk)
    _corrupt_content_stops_the_job(cfg, late, kafka_bootstrap, topic, tmp_path)


def _corrupt_content_stops_the_job(
    cfg,
    late: dict,
    kafka_bootstrap: str,
    topic: str,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    """Corrupt content through the real job, in `routectl run` processes of their own (no
    Python worker holds a text in memory), each stopping with the store's message naming the
    reference, the file, the checkpoint and the fix, nothing dead-lettered:
    - `late` is parked in the checkpoint's state; its topic table's file gets a non-UTF-8 byte,
      and a heartbeat carries the watermark past it (the registration is applied);
    - restored, the registration is applied (an in-process run), and every file that run wrote
      (the group's topics in its state) is truncated: the next run loading the group's state
      stops on one of them."""
    checkpoint, warehouse = tmp_path / "checkpoint", tmp_path / "warehouse"
    scratch = ContentSettings(str(tmp_path / "scratch"), 0)
    payload = classify(json.dumps(late).encode(), "k", 0, None, 0, store=scratch).payload
    assert payload is not None
    ref = payload.rsplit("\x1e", 1)[1][1:]
    pending = checkpoint / "content" / ref[:2] / ref
    data = pending.read_bytes()
    pending.write_bytes(data[:20] + b"\xff" + data[21:])
    heartbeat = {key: late[key] for key in ("clusterName", "brokerAddr", "brokerName", "brokerId")}
    heartbeat |= {"eventType": "HEARTBEAT", "eventTime": late["eventTime"] + DELAY_MS + 1000}
    produce(kafka_bootstrap, topic, [json.dumps(heartbeat).encode()])
    said = _failed_run(kafka_bootstrap, topic, tmp_path)
    assert said.startswith(
        f"routectl run: content corrupt under checkpoint {checkpoint}: corrupt content for "
        f"reference {ref}: file {pending} of checkpoint {checkpoint} holds {len(data)} bytes"
    ), said
    assert _dead_letters(warehouse) == 0

    pending.write_bytes(data)
    before = set((checkpoint / "content").rglob("*"))
    run_route_state(cfg, available_now=True, install_signal_handlers=False)
    written = {p for p in (checkpoint / "content").rglob("*") if p.is_file()} - before
    assert written, "applying the registration stored the group's topics"
    for path in written:
        path.write_bytes(path.read_bytes()[:-1])
    heartbeat["eventTime"] += 1000
    produce(kafka_bootstrap, topic, [json.dumps(heartbeat).encode()])
    said = _failed_run(kafka_bootstrap, topic, tmp_path)
    named = re.search(
        r"corrupt content for reference ([0-9a-f]{32}): file (\S+) of checkpoint ", said
    )
    assert named is not None and Path(named.group(2)) in written, said
    assert named.group(2).endswith(f"/{named.group(1)[:2]}/{named.group(1)}")
    assert f"content corrupt under checkpoint {checkpoint}" in said
    assert _dead_letters(warehouse) == 0


def _failed_run(kafka_bootstrap: str, topic: str, tmp_path: Path) -> str:
    """`routectl run --available-now` in a process of its own, which must fail: its one-line
    message, checked to carry the content store's fix."""
    run = ["run", "--available-now", "--kafka", kafka_bootstrap, "--topic", topic]
    run += [
        "--warehouse",
        str(tmp_path / "warehouse"),
        "--checkpoint",
        str(tmp_path / "checkpoint"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "routing_lib.cli", *run],
        env={
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "ROUTELAKE_SPARK_CONTENT_MIN_CHARS": "0",
        },
        capture_output=True,
        text=True,
        timeout=900,
    )
    said = [line for line in done.stderr.splitlines() if line.startswith("routectl run: ")]
    assert done.returncode == 1 and said, (done.returncode, done.stderr[-4000:])
    assert "Restore the content folder" in said[-1] and "fresh checkpoint" in said[-1], said[-1]
    return said[-1]


def _dead_letters(warehouse: Path) -> int:
    return int(storage.open_delta(warehouse / DEAD_LETTER).to_pyarrow_table().num_rows)
