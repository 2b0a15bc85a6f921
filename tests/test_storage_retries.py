"""The S3 client's retries from the AWS SDKs' own variables (routing_lib/storage.py):
AWS_RETRY_MODE and AWS_MAX_ATTEMPTS, read at call time like the endpoint and credentials."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from routing_lib import storage


@pytest.fixture(autouse=True)
def _no_aws_retry_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)


def test_unset_is_pyarrows_own_default_standard_with_three_attempts():
    assert storage.retry_settings() == ("standard", 3)


@pytest.mark.parametrize(
    ("mode", "attempts", "expected"),
    [
        ("legacy", "3", ("legacy", 3)),
        (" Standard ", "5", ("standard", 5)),
        ("", "1", ("standard", 1)),
    ],
)
def test_the_variables_choose_mode_and_attempts(monkeypatch, mode, attempts, expected):
    monkeypatch.setenv("AWS_RETRY_MODE", mode)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", attempts)
    assert storage.retry_settings() == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("AWS_RETRY_MODE", "adaptive", "AWS_RETRY_MODE='adaptive'"),
        ("AWS_MAX_ATTEMPTS", "0", "AWS_MAX_ATTEMPTS='0'"),
        ("AWS_MAX_ATTEMPTS", "three", "AWS_MAX_ATTEMPTS='three'"),
    ],
)
def test_a_value_the_client_cannot_follow_is_an_error_naming_it(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        storage.retry_settings()


def test_each_mode_gets_its_pyarrow_strategy():
    assert isinstance(storage.retry_strategy("legacy", 3), pafs.AwsDefaultS3RetryStrategy)
    assert isinstance(storage.retry_strategy("standard", 3), pafs.AwsStandardS3RetryStrategy)


def test_the_filesystem_follows_a_change_of_the_variables(monkeypatch):
    """The cached client is per retry setting: a changed variable is not answered by a client
    built with the old one."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    standard, path = storage.filesystem("s3://bucket/prefix/x")
    assert storage.filesystem("s3://bucket/prefix/x")[0] is standard
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")
    legacy, _ = storage.filesystem("s3://bucket/prefix/x")
    assert legacy is not standard and path == "bucket/prefix/x"
