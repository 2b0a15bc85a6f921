"""A real S3-compatible HTTP endpoint for the object-storage tests: moto's server (moto[server],
a test dependency) on a fixed port, started once per test session, one bucket."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HOST, PORT = "127.0.0.1", 29500  # object-storage tests own 29500-29509
BUCKET = "routelake-test"
# For tests that inject S3 faults (tests/support/fault_proxy.py): pyarrow's S3 client tries each
# request 3 times, as by default, but with the SDK's legacy backoff (0, 50 ms) instead of the
# standard mode's jittered 0-2 s, 0-4 s (routing_lib/storage.retry_settings). Faults that outlast
# the SDK's tries still do, and the store's own retries are still what carries them; the tests
# only stop sleeping seconds per fault.
QUICK_SDK_RETRIES = {"AWS_RETRY_MODE": "legacy", "AWS_MAX_ATTEMPTS": "3"}


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    bucket: str
    env: dict[str, str]  # AWS_* for subprocesses (also set in this process)

    def prefix(self, scheme: str = "s3a") -> str:
        """A fresh prefix in the bucket, e.g. s3a://routelake-test/3f2a.../"""
        return f"{scheme}://{self.bucket}/{uuid.uuid4().hex[:12]}"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _moto_server() -> str:
    found = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if found is None:
        message = "moto_server is missing: pip install -e '.[test]' (scripts/setup.sh)"
        if os.environ.get("CI"):
            pytest.fail(message)  # a missing prerequisite in CI is a failure, not a skip
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    if _listening(PORT):
        pytest.fail(f"port {PORT} is taken: another moto server or process holds it")
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [_moto_server(), "-H", HOST, "-p", str(PORT)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(PORT):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        url = f"http://{HOST}:{PORT}"
        env = {
            "AWS_ACCESS_KEY_ID": "routelake-test",
            "AWS_SECRET_ACCESS_KEY": "routelake-test-secret",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": url,
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            import boto3

            boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(
                Bucket=BUCKET
            )
            yield S3Endpoint(url, BUCKET, env)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
