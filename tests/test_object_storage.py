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
import re
import subprocess
import sys
import time
from pathlib import Path

import boto3
import httpx
import pytest

from routing_lib import storage
from routing_lib.cli import main as routectl
from routing_lib.content_files import ContentSettings
from routing_lib.core.catalog import DEAD_LETTER
from routing_lib.core.dump import project
from routing_lib.core.tables import PROGRESS, TOPIC_QUEUE
from routing_lib.housekeeping import housekeep
from routing_lib.ingest import classify
from routing_lib.lookup.consistency import lookup_versions
from routing_lib.read.warehouse import load_snapshot
from tests.support.fault_proxy import RESET, fault_proxy
from tests.support.helpers import DELAY_MS, GOLDEN, expected_dump, reference_dump, register_record
from tests.support.job_commands import run_args
from tests.support.kafka_support import lines_of, produce
from tests.support.s3_support import QUICK_SDK_RETRIES, S3Endpoint

pytestmark = [pytest.mark.s3, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "15_delete_topic_admin"  # DELETE_TOPIC: workers read the admin log from S3 too
JOB_TIMEOUT_S = 900  # a Spark job on a loaded 2-core machine
SERVE_PORT, SERVE_HTTP_PORT = 29501, 29502


def _routectl_process(endpoint: S3Endpoint, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **endpoint.env, PYSPARK_PYTHON=sys.executable)
    done = _routectl_exit(env, *args)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _answer(*args: str) -> tuple[int, str]:
    """`routectl ARGS` in this process: exit status and stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = routectl(list(args))
    return status, out.getvalue()


def _without_sources(answer: tuple[int, str]) -> tuple[int, str]:
    """An answer with each row's archive file and line left out (`history admin` names them:
    the bucket's two files here, the fixture's one file in the local run)."""
    return answer[0], re.sub(r'"(source|position)": ("[^"]*"|[0-9]+)', r'"\1": ""', answer[1])


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
    """`routectl backfill` of the golden fixture into s3a://bucket/prefix/warehouse, from the
    fixture's events cut into two archive files in the bucket (one with a space in its name):
    stage one reads each archive file from the s3a:// path the file source lists."""
    folder = s3_endpoint.prefix("s3a")
    lines = (GOLDEN / FIXTURE / "events.jsonl").read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    storage.write_bytes(f"{folder}/input/part one.jsonl", b"".join(lines[:half]))
    storage.write_bytes(f"{folder}/input/part-2.jsonl", b"".join(lines[half:]))
    warehouse = f"{folder}/warehouse"
    _routectl_process(
        s3_endpoint, "backfill", "--input", f"{folder}/input", "--warehouse", warehouse
    )
    return warehouse


def test_backfill_to_s3a_reads_back_like_the_local_disk_run(s3_backfill, backfill):
    """The archives in the bucket, backfilled into the bucket, give the local run's tables,
    and every read command answers the same from s3:// and s3a:// as from the local disk."""
    local_dump = backfill([GOLDEN / FIXTURE / "events.jsonl"])
    assert local_dump == expected_dump(FIXTURE)
    s3 = storage.delta_uri(s3_backfill)
    assert s3.startswith("s3://")
    # Nothing on the local disk: the warehouse lives in the bucket.
    assert not Path(s3_backfill).exists() and not (ROOT / "s3a:").exists()
    assert project(load_snapshot(s3).dump()) == local_dump
    answers = 0
    for command in _read_commands(local_dump):
        local = _without_sources(_answer(*command, "--warehouse", str(backfill.warehouse)))
        assert local[1] or command[0] == "route", command  # every read answers something
        for location in (s3, s3_backfill):  # s3:// and the s3a:// a user may paste
            answer = _without_sources(_answer(*command, "--warehouse", location))
            assert answer == local, (command, location)
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
        # the versions the lookup serves: the route tables, topic_base and topic_overlay
        assert body["versions"] == lookup_versions(storage.delta_uri(s3_backfill))
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


def _routectl_exit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "routing_lib.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )


def _said(done: subprocess.CompletedProcess) -> str:
    """The job's one-paragraph failure message (routing_lib/spark/failures.py)."""
    assert done.returncode == 1, (done.returncode, done.stderr[-4000:])
    lines = [line for line in done.stderr.splitlines() if line.startswith("routectl run: ")]
    assert lines, done.stderr[-4000:]
    return lines[-1]


def _ref_of_topic_table(event: dict, work: Path) -> str:
    """The content reference stage one gives this registration's topic table (a digest of
    the content alone: the same in any folder)."""
    payload = classify(
        json.dumps(event).encode(), "k", 0, None, 0, store=ContentSettings(str(work), 0)
    ).payload
    assert payload is not None
    return payload.rsplit("\x1e", 1)[1][1:]


def test_streaming_job_with_warehouse_and_checkpoint_on_s3a(
    s3_endpoint,  # noqa: F811
    kafka_bootstrap,
    topic,
    tmp_path,
):
    """Two runs resume from the checkpoint in the bucket, every value a content reference;
    the jobs reach S3 through a proxy that injects faults into the content folder's requests
    (tests/support/fault_proxy.py):
    - 503s on stage one's writes, then resets on the step's reads, each more in a row than the
      S3 client retries by itself: the store's retries carry them and the tables equal the
      plain replay;
    - reads failing for good: the query stops with the content store's message, nothing is
      dead-lettered, and the next run (faults gone) resumes from the checkpoint;
    - a pending registration's content object deleted, then (restored) every other one:
      each run stops with a message that names the reference, its object, the checkpoint and
      the fix."""
    root = s3_endpoint.prefix("s3a")
    warehouse, checkpoint = root + "/warehouse", root + "/checkpoint"
    content_keys = checkpoint.split("/", 3)[3] + "/content/"
    lines = lines_of(FIXTURE)
    last = max(json.loads(line)["eventTime"] for line in lines)
    # a broker group registering after the fixture's end: parked in state when run 3 ends
    late_group = register_record(last + 1000, "C9", "10.0.9.1", "broker-z", "ZTopic")
    heartbeat = {
        "eventType": "HEARTBEAT",
        "eventTime": last + 1000 + DELAY_MS + 1000,
        "clusterName": "C9",
        "brokerAddr": "10.0.9.1:10911",
        "brokerName": "broker-z",
        "brokerId": 0,
    }
    pending_ref = _ref_of_topic_table(late_group, tmp_path / "content")
    # broker-a's first registration (line 0): its topic table is written by stage one in the
    # first run and read by the step that applies it in the third. Faults on that one object
    # meet one writer or reader, whose S3 client's own 3 tries they outlast.
    first_table = _ref_of_topic_table(json.loads(lines[0]), tmp_path / "content")
    first_key = f"{content_keys}{first_table[:2]}/{first_table}"
    first_object = f"s3a://{s3_endpoint.bucket}/{first_key}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint.url, region_name="us-east-1")

    def dead_letters() -> int:
        table = storage.open_delta(storage.join(storage.delta_uri(warehouse), DEAD_LETTER))
        return int(table.to_pyarrow_table().num_rows)

    def content_objects() -> list[str]:
        listed = s3.list_objects_v2(Bucket=s3_endpoint.bucket, Prefix=content_keys)
        return [entry["Key"] for entry in listed.get("Contents", [])]

    with fault_proxy(s3_endpoint.url) as proxy:
        env = {
            **os.environ,
            **s3_endpoint.env,
            "PYSPARK_PYTHON": sys.executable,
            "AWS_ENDPOINT_URL": proxy.url,  # Spark's s3a, pyarrow and delta-rs alike
            "ROUTELAKE_SPARK_CONTENT_MIN_CHARS": "0",
            "ROUTELAKE_SPARK_CONTENT_IO_BACKOFF_S": "0.05",
            **QUICK_SDK_RETRIES,  # the workers' pyarrow: 3 tries per request, ms apart
        }
        run = run_args(kafka_bootstrap, topic, warehouse, checkpoint, "--available-now")
        writes = proxy.fail(first_key, 503, 4, ("PUT",))
        produce(kafka_bootstrap, topic, lines[:4])
        done = _routectl_exit(env, *run)
        assert done.returncode == 0, done.stderr[-4000:]
        assert writes.injected == 4
        assert f"content store: writing {first_object} failed" in done.stderr  # the store retried

        stuck = proxy.fail(content_keys, 500, None, ("GET", "HEAD"))
        produce(kafka_bootstrap, topic, [*lines[4:], json.dumps(late_group).encode()])
        said = _said(_routectl_exit(env, *run))
        assert said.startswith(f"routectl run: the content store under checkpoint {checkpoint}")
        assert "kept failing" in said and "failed 5 times" in said, said
        assert stuck.injected >= 5
        assert dead_letters() == 0

        proxy.clear()
        reads = proxy.fail(first_key, RESET, 4, ("GET", "HEAD"))
        done = _routectl_exit(env, *run)
        assert done.returncode == 0, done.stderr[-4000:]
        assert reads.injected == 4
        assert f"content store: reading {first_object} failed" in done.stderr
        expected = reference_dump([line.decode() for line in lines] + [json.dumps(late_group)])
        assert project(load_snapshot(storage.delta_uri(warehouse)).dump()) == expected
        progress = storage.open_delta(storage.join(warehouse, PROGRESS)).to_pyarrow_table()
        assert sum(progress.column("input_rows").to_pylist()) == len(lines) + 1
        assert dead_letters() == 0

        # A content object the pending registration names is lost (a lifecycle rule, a
        # restore without it): applying the registration stops the job.
        pending_key = f"{content_keys}{pending_ref[:2]}/{pending_ref}"
        kept = s3.get_object(Bucket=s3_endpoint.bucket, Key=pending_key)["Body"].read()
        s3.delete_object(Bucket=s3_endpoint.bucket, Key=pending_key)
        produce(kafka_bootstrap, topic, [json.dumps(heartbeat).encode()])
        said = _said(_routectl_exit(env, *run))
        assert said.startswith(
            f"routectl run: content missing under checkpoint {checkpoint}: no content for "
            f"reference {pending_ref}: file {checkpoint}/content/{pending_ref[:2]}/{pending_ref}"
            f" of checkpoint {checkpoint} is missing."
        ), said
        assert "Restore the content folder" in said and "fresh checkpoint" in said

        # It comes back, and everything else goes (a checkpoint restored without its content
        # folder): the references the groups' saved state names stop the job.
        s3.put_object(Bucket=s3_endpoint.bucket, Key=pending_key, Body=kept)
        lost = {key.rsplit("/", 1)[1] for key in content_objects()} - {pending_ref}
        for key in content_objects():
            if not key.endswith(pending_ref):
                s3.delete_object(Bucket=s3_endpoint.bucket, Key=key)
        said = _said(_routectl_exit(env, *run))
        named = re.search(r"no content for reference ([0-9a-f]{32}): file (\S+) of", said)
        assert named is not None, said
        assert named.group(1) in lost
        assert named.group(2) == f"{checkpoint}/content/{named.group(1)[:2]}/{named.group(1)}"
        assert f"content missing under checkpoint {checkpoint}" in said
        assert "Restore the content folder" in said and "fresh checkpoint" in said
        assert dead_letters() == 0
    assert storage.is_dir(storage.join(checkpoint, "offsets"))
