"""The content store on object storage, against moto's S3 server (tests/support/s3_support.py):
an S3 error while writing is retried until the store answers, S3 errors injected by a proxy in
front of the server (tests/support/fault_proxy.py) while stage one writes and the step reads
are retried by the SDK and then by the store, a read checks the digest, a missing object names
its s3:// path, the collector deletes unreferenced objects only, and a writer refreshing an
object while the collector checks and deletes it (the proxy holding the collector's request)
keeps it, through the tombstone both read.
No Spark: the folder backend and the sweep talk to S3 through pyarrow, as the workers do (the
same faults through the Spark job: test_object_storage.py)."""

from __future__ import annotations

import json
import logging
import random
import threading
import time

import boto3
import pytest
from botocore.exceptions import ClientError

from routing_lib import content_files, storage
from routing_lib.content_files import TOMBSTONE_DELETED, ContentFolder, ContentSettings
from routing_lib.content_gc import content_size, sweep
from routing_lib.core.content import (
    CONTENT,
    ContentStorageError,
    ContentStore,
    CorruptContentError,
    MissingContentError,
    content_ref,
)
from routing_lib.ingest import classify
from schemas import parse_event
from tests.support.fault_proxy import RESET, fault_proxy
from tests.support.helpers import DELAY_MS, fixture_lines, reference_dump, register_record
from tests.support.s3_support import QUICK_SDK_RETRIES, S3Endpoint
from tests.support.stream_model import StreamModel

pytestmark = pytest.mark.s3


def _client(endpoint: S3Endpoint):  # noqa: ANN202 - boto3's client type is generated
    return boto3.client("s3", endpoint_url=endpoint.url, region_name="us-east-1")


def test_an_s3_error_while_writing_is_retried_until_the_store_answers(s3_endpoint):  # noqa: F811
    """The bucket does not exist yet: S3 answers NoSuchBucket to the first PUTs; it is created
    while the store backs off, and the write goes through."""
    bucket = f"late-{int(time.time() * 1000)}"
    folder = ContentFolder(f"s3://{bucket}/checkpoint/content", attempts=8, backoff_s=0.1)
    created = threading.Timer(0.3, lambda: _client(s3_endpoint).create_bucket(Bucket=bucket))
    created.start()
    ref = content_ref("topics written through a throttle")
    folder.write(ref, "topics written through a throttle")
    created.join()
    assert ContentStore().attach(folder).read(ref) == "topics written through a throttle"


def test_an_s3_error_past_the_retries_fails(s3_endpoint):  # noqa: F811
    folder = ContentFolder("s3://no-such-bucket-ever/checkpoint/content", 2, 0.0)
    with pytest.raises(ContentStorageError, match="failed 2 times"):
        folder.write(content_ref("x"), "x")


def test_s3_reads_check_the_digest_and_name_a_missing_object(s3_endpoint):  # noqa: F811
    location = s3_endpoint.prefix("s3") + "/checkpoint/content"
    store = ContentStore()
    folder = store.attach(ContentFolder(location, 2, 0.0))
    ref = store.put("a table on S3", folder)
    key = location.split("/", 3)[3] + f"/{ref[1:3]}/{ref[1:]}"
    _client(s3_endpoint).put_object(Bucket=s3_endpoint.bucket, Key=key, Body=b"a table on S4")
    with pytest.raises(CorruptContentError, match=ref[1:]):
        ContentStore().attach(ContentFolder(location)).read(ref)
    _client(s3_endpoint).delete_object(Bucket=s3_endpoint.bucket, Key=key)
    fresh = ContentStore()
    fresh.attach(ContentFolder(location))
    with pytest.raises(MissingContentError, match=f"file {location}/{ref[1:3]}/{ref[1:]} of"):
        fresh.get(ref)


def test_the_sweep_on_s3_deletes_only_unreferenced_objects(s3_endpoint):  # noqa: F811
    location = s3_endpoint.prefix("s3") + "/checkpoint/content"
    folder = ContentFolder(location)
    kept, gone = content_ref("named by state"), content_ref("named by nothing")
    folder.write(kept, "named by state")
    folder.write(gone, "named by nothing")
    assert sweep(location, {kept[1:]}, time.time(), 3600).deleted == []  # all too recent
    report = sweep(location, {kept[1:]}, time.time() + 7200, 3600)  # as if two hours later
    assert report.deleted == [gone[1:]]
    # the deleted object's tombstone stays for writers (content_files.py), then goes as well
    tombstone = len(TOMBSTONE_DELETED)
    assert content_size(location) == (2, len("named by state") + tombstone)
    report = sweep(location, {kept[1:]}, time.time() + 3 * 7200, 3600)
    assert (report.deleted, report.deleted_temporaries) == ([], 1)
    assert content_size(location) == (1, len("named by state"))


@pytest.mark.parametrize("held", ["HEAD", "DELETE"], ids=["before-the-check", "before-the-delete"])
def test_a_refresh_racing_the_s3_sweep_keeps_its_object(s3_endpoint, monkeypatch, held):  # noqa: F811
    """The sweep found an old object no state names; a writer re-sends its table while the
    sweep's date check (HEAD) or its DELETE is held at the proxy: the writer's PUT lands just
    before it, then the held request goes on. The object must be there afterwards: the
    reference the writer hands out is about to be committed."""
    monkeypatch.setattr(content_files, "TOMBSTONE_WAIT_S", 1.5)  # a kept object's tombstone
    CONTENT.clear()
    with fault_proxy(s3_endpoint.url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        location = s3_endpoint.prefix("s3") + "/checkpoint/content"
        folder = ContentFolder(location, 2, 0.0)
        text = "a table re-sent after an hour"
        ref = content_ref(text)
        folder.write(ref, text)
        time.sleep(2.1)  # LastModified counts whole seconds: now older than the sweep's cutoff
        key = f"{location.split('/', 3)[3]}/{ref[1:3]}/{ref[1:]}"
        moto = _client(s3_endpoint)  # past the proxy
        written = _last_modified(moto, s3_endpoint.bucket, key)
        hold = proxy.hold(f"/{key}", (held,))  # the object only, not its tombstone (.gc-...)
        sweeper = threading.Thread(target=sweep, args=(location, set(), time.time(), 1.0))
        sweeper.start()
        assert hold.arrived.wait(30), "the sweep took the object for a victim"
        writer = threading.Thread(target=folder.write, args=(ref, text))
        writer.start()
        deadline = time.monotonic() + 30
        while _last_modified(moto, s3_endpoint.bucket, key) == written:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)  # until the writer's upload has landed
        refreshed = _last_modified(moto, s3_endpoint.bucket, key)
        hold.release()
        sweeper.join(60)
        writer.join(60)
        assert refreshed not in (written, None), "the writer's upload landed before the release"
        assert ContentFolder(location).read(ref) == text


def test_a_sweep_failing_mid_way_makes_writers_put_again(s3_endpoint, monkeypatch, caplog):  # noqa: F811
    """The sweep's DELETE fails (the store keeps answering 500): the sweep raises and its
    tombstone still says "sweeping" (nothing may say no DELETE is coming: another collection
    may share it). A writer of that object waits until it has said so for TOMBSTONE_WAIT_S,
    then uploads again; a later writer finds it old and uploads again at once."""
    monkeypatch.setattr(content_files, "TOMBSTONE_WAIT_S", 1.5)  # dates have whole seconds
    caplog.set_level(logging.INFO, logger="routelake.content")
    with fault_proxy(s3_endpoint.url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        location = s3_endpoint.prefix("s3") + "/checkpoint/content"
        folder = ContentFolder(location, 2, 0.0)
        text = "a table whose sweep failed"
        ref = content_ref(text)
        folder.write(ref, text)
        key = f"/{ref[1:3]}/{ref[1:]}"
        proxy.fail(key, 500, None, ("DELETE",))
        with pytest.raises(OSError):
            sweep(location, set(), time.time() + 7200, 3600)
        proxy.clear()
        tombstone = content_files.tombstone_path(f"{location}/{ref[1:3]}/{ref[1:]}")
        assert storage.read_bytes(tombstone) == content_files.TOMBSTONE_SWEEPING

        storage.write_bytes(tombstone, content_files.TOMBSTONE_SWEEPING)  # dated now, as if
        # the failed sweep had just written it (the SDK's retries of the DELETE took a while)
        uploads, started = proxy.answered_count("POST", key), time.monotonic()
        folder.write(ref, text)  # waits: a collection may be deleting it now
        assert time.monotonic() - started >= 0.5
        assert any("has said sweeping since" in r.getMessage() for r in caplog.records)
        assert proxy.answered_count("POST", key) - uploads == 4  # two uploads of two POSTs
        uploads, reads = proxy.answered_count("POST", key), proxy.answered_count("GET", "/.gc-")
        folder.write(ref, text)  # said so for longer than the wait by now: no wait at all
        assert proxy.answered_count("GET", "/.gc-") - reads == 1
        assert proxy.answered_count("POST", key) - uploads == 4
        assert ContentFolder(location).read(ref) == text


def _last_modified(client, bucket: str, key: str) -> object:  # noqa: ANN001 - boto3's client
    """The object's LastModified as moto holds it now (None: no object)."""
    try:
        return client.head_object(Bucket=bucket, Key=key)["LastModified"]
    except ClientError:
        return None


# Keys of the content folder only: the proxy lets every other request through.
CONTENT_KEYS = "/checkpoint/content/"
READS, WRITES = ("GET", "HEAD"), ("PUT",)
# pyarrow's S3 client tries each request up to 3 times (AWS_MAX_ATTEMPTS in QUICK_SDK_RETRIES, the
# default; the standard mode's while its retry quota lasts): 4 faults in a row fail at least one
# attempt of the store, which tries 5 times, so its own retry is needed and suffices whatever
# the SDK did.
FAULTS_IN_A_ROW = 4


def test_s3_faults_in_stage_one_and_the_step_are_retried_and_give_the_replay(
    s3_endpoint,  # noqa: F811
    monkeypatch,
    caplog,
):
    """Before each micro-batch the proxy arms FAULTS_IN_A_ROW faults (503, 500 or a reset) for
    the content folder's writes or reads; every batch starts with an empty cache, so the step
    reads every reference from S3. The tables equal the plain replay, and the store retried."""
    rng = random.Random(21)
    lines = fixture_lines("14_write_perm_admin")
    events = [parse_event(line) for line in lines]
    caplog.set_level(logging.WARNING, logger="routelake.content")
    CONTENT.clear()
    with fault_proxy(s3_endpoint.url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        for name, value in QUICK_SDK_RETRIES.items():
            monkeypatch.setenv(name, value)
        location = s3_endpoint.prefix("s3") + "/checkpoint/content"
        model = StreamModel(DELAY_MS, True, backend=ContentFolder(location, 5, 0.0))
        i = batches = 0
        while i < len(events):
            size = rng.randint(1, 2)
            CONTENT.clear()  # a fresh Python worker: every reference is read from S3
            fault = (503, 500, RESET)[batches % 3]
            proxy.fail(CONTENT_KEYS, fault, FAULTS_IN_A_ROW, WRITES if batches % 2 else READS)
            model.batch([(e, ("file", i + n)) for n, e in enumerate(events[i : i + size])])
            i += size
            batches += 1
        final = max(e.eventTime for e in events) - DELAY_MS
        model.finish(final)
        dump = model.dump()
    assert dump == reference_dump(lines)
    injected = {(r.fault, tuple(sorted(r.methods or ()))) for r in proxy.rules if r.injected}
    assert len(injected) == 6, injected  # every fault, on reads and on writes
    retried = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert any("writing s3://" in m for m in retried) and any("reading s3://" in m for m in retried)
    CONTENT.clear()


def test_s3_faults_past_the_retries_fail_stage_one_and_the_step(s3_endpoint, monkeypatch):  # noqa: F811
    """A store that keeps failing fails the call (the task, in Spark), never a dead letter."""
    CONTENT.clear()
    with fault_proxy(s3_endpoint.url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        for name, value in QUICK_SDK_RETRIES.items():
            monkeypatch.setenv(name, value)
        location = s3_endpoint.prefix("s3") + "/checkpoint/content"
        settings = ContentSettings(location, 0, 2, 0.0)
        register = register_record(1_764_000_000_000, "C1", "10.0.0.1", "broker-s3", "s3-faults")
        raw = json.dumps(register).encode()
        rule = proxy.fail(CONTENT_KEYS, 503, None, WRITES)
        with pytest.raises(ContentStorageError, match="writing s3://.* failed 2 times"):
            classify(raw, "k-0", 1, None, 0, store=settings)
        assert rule.injected >= 2
        proxy.clear()
        classified = classify(raw, "k-0", 1, None, 0, store=settings)
        assert classified.payload is not None
        ref = classified.payload.rsplit("\x1e", 1)[1]
        CONTENT.clear()
        proxy.fail(CONTENT_KEYS, RESET, None, READS)
        with pytest.raises(ContentStorageError, match="reading s3://.* failed 2 times"):
            CONTENT.get(ref)
    CONTENT.clear()
