"""The content store on object storage, against moto's S3 server (tests/support/s3_support.py):
an S3 error while writing is retried until the store answers, a read checks the digest, a
missing object names its s3:// path, and the collector deletes unreferenced objects only.
No Spark: the folder backend and the sweep talk to S3 through pyarrow, as the workers do."""

from __future__ import annotations

import threading
import time

import boto3
import pytest

from routing_lib.content_files import ContentFolder
from routing_lib.content_gc import content_size, sweep
from routing_lib.core.content import (
    ContentStorageError,
    ContentStore,
    CorruptContentError,
    MissingContentError,
    content_ref,
)
from tests.support.s3_support import S3Endpoint

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
    assert content_size(location) == (1, len("named by state"))
