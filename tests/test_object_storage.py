"""Warehouse and checkpoint on object storage, against a real S3-compatible server on a port
(moto's, tests/support/s3_support.py): Spark writes s3a://, every delta-rs reader reads s3:// (and
s3a:// spelled by the user), and every answer equals the local-disk run's.

The Spark jobs run as `routectl` subprocesses: their JVM and Python workers must start with the
AWS_* environment (the test session's own Spark started without it)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from routing_lib import storage
from routing_lib.cli import main as routectl
from routing_lib.core.dump import project
from routing_lib.core.tables import PROGRESS, TOPIC_QUEUE
from routing_lib.housekeeping import housekeep
from routing_lib.read.warehouse import load_snapshot, table_versions
from tests.support.helpers import GOLDEN, expected_dump, fixture_lines
from tests.support.s3_support import S3Endpoint

pytestmark = [pytest.mark.s3, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "15_delete_topic_admin"  # DELETE_TOPIC: workers read the admin log from S3 too
JOB_TIMEOUT_S = 900  # a Spark job on a loaded 2-core machine
SERVE_PORT, SERVE_HTTP_PORT = 29501, 29502


def _routectl_process(endpoint: S3Endpoint, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **endpoint.env, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-m", "routing_lib.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _answer(*args: str) -> tuple[int, str]:
    """`routectl ARGS` in this process: exit status and stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = routectl(list(args))
    return status, out.getvalue()


def _read_commands(dump: dict) -> list[list[str]]:
    topics = sorted(dump["topicQueueTable"])
    brokers = sorted(dump["brokerAddrTable"])
    return [
        ["dump"],
        ["clusters"],
        *(["route", t] for t in [*topics, "NoSuchTopic"]),
        *(["as-of", "--at", str(at)] for at in (1764000006500, 1764000040000)),
        *(["history", "topic", t] for t in topics),
        *(["history", "broker", b] for b in brokers),
        ["history", "admin"],
    ]


@pytest.fixture(scope="module")
def s3_backfill(s3_endpoint: S3Endpoint) -> str:  # noqa: F811
    """`routectl backfill` of the golden fixture into s3a://bucket/prefix/warehouse."""
    warehouse = s3_endpoint.prefix("s3a") + "/warehouse"
    events = str(GOLDEN / FIXTURE / "events.jsonl")
    _routectl_process(s3_endpoint, "backfill", "--input", events, "--warehouse", warehouse)
    return warehouse


def test_backfill_to_s3a_reads_back_like_the_local_disk_run(s3_backfill, backfill):
    local_dump = backfill([GOLDEN / FIXTURE / "events.jsonl"])
    assert local_dump == expected_dump(FIXTURE)
    s3 = storage.delta_uri(s3_backfill)
    assert s3.startswith("s3://")
    # Nothing on the local disk: the warehouse lives in the bucket.
    assert not Path(s3_backfill).exists() and not (ROOT / "s3a:").exists()
    assert project(load_snapshot(s3).dump()) == local_dump
    answers = 0
    for command in _read_commands(local_dump):
        local = _answer(*command, "--warehouse", str(backfill.warehouse))
        assert local[1] or command[0] == "route", command  # every read answers something
        for location in (s3, s3_backfill):  # s3:// and the s3a:// a user may paste
            assert _answer(*command, "--warehouse", location) == local, (command, location)
            answers += 1
    assert answers >= 2 * 10


def test_routectl_dump_subprocess_reads_s3(s3_endpoint, s3_backfill):  # noqa: F811
    done = _routectl_process(s3_endpoint, "dump", "--warehouse", storage.delta_uri(s3_backfill))
    assert project(json.loads(done.stdout)) == expected_dump(FIXTURE)


def test_missing_s3_warehouse_is_a_clear_error(s3_endpoint):  # noqa: F811
    status, _ = _answer("dump", "--warehouse", s3_endpoint.prefix("s3") + "/nothing-here")
    assert status == 1


def test_lookup_server_serves_a_route_from_s3(s3_endpoint, s3_backfill):  # noqa: F811
    dump = expected_dump(FIXTURE)
    topic = next(t for t in sorted(dump["topicQueueTable"]) if not t.startswith("TBW"))
    expected = json.loads(_answer("route", topic, "--warehouse", s3_backfill)[1])
    env = dict(os.environ, **s3_endpoint.env)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "routing_lib.cli",
            "serve",
            "--warehouse",
            storage.delta_uri(s3_backfill),
            "--port",
            str(SERVE_PORT),
            "--http-port",
            str(SERVE_HTTP_PORT),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{SERVE_HTTP_PORT}"
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read()[-3000:]
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "lookup server not ready"
            time.sleep(0.5)
        answer = httpx.get(f"{base}/topics/{topic}/route", timeout=10)
        assert answer.status_code == 200
        body = answer.json()
        assert body["versions"] == table_versions(storage.delta_uri(s3_backfill))
        assert body["data"] == expected
        assert httpx.get(f"{base}/topics/NoSuchTopic/route", timeout=10).status_code == 404
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_housekeeping_on_s3_keeps_every_answer(s3_backfill):
    s3 = storage.delta_uri(s3_backfill)
    before = load_snapshot(s3).dump()
    reports = housekeep(s3, vacuum_hours=0, disable_retention_check=True)
    assert not [r.line(False) for r in reports if r.error]
    by_table = {r.table: r for r in reports}
    # The progress table took one commit per micro-batch: compacted to one file.
    assert by_table[PROGRESS].files_before > 1 and by_table[PROGRESS].files_after == 1
    assert by_table[PROGRESS].vacuumed  # the replaced files are deleted from the bucket
    assert not any(
        storage.exists(storage.join(s3, PROGRESS, f)) for f in by_table[PROGRESS].vacuumed
    )
    assert by_table[TOPIC_QUEUE].skipped is None
    assert load_snapshot(s3).dump() == before


def test_streaming_job_with_warehouse_and_checkpoint_on_s3a(s3_endpoint, kafka_bootstrap, topic):  # noqa: F811
    from tests.support.kafka_support import lines_of, produce

    root = s3_endpoint.prefix("s3a")
    warehouse, checkpoint = root + "/warehouse", root + "/checkpoint"
    lines = lines_of(FIXTURE)
    run = [
        "run",
        "--available-now",
        "--kafka",
        kafka_bootstrap,
        "--topic",
        topic,
        "--warehouse",
        warehouse,
        "--checkpoint",
        checkpoint,
    ]
    # Two runs: the second resumes from the checkpoint's offsets and state in the bucket.
    produce(kafka_bootstrap, topic, lines[:4])
    _routectl_process(s3_endpoint, *run)
    produce(kafka_bootstrap, topic, lines[4:])
    _routectl_process(s3_endpoint, *run)
    assert project(load_snapshot(storage.delta_uri(warehouse)).dump()) == expected_dump(FIXTURE)
    progress = storage.open_delta(storage.join(warehouse, PROGRESS)).to_pyarrow_table()
    assert sum(progress.column("input_rows").to_pylist()) == len(fixture_lines(FIXTURE))
    assert storage.is_dir(storage.join(checkpoint, "offsets"))
