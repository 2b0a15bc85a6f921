"""Where a warehouse or checkpoint lives: a local folder or object storage (docs/object-storage.md).

A location is a string: a local path, or `s3a://bucket/prefix` / `s3://bucket/prefix` (the
same objects). Spark (Hadoop) speaks `s3a://`, delta-rs and pyarrow speak `s3://`: each side
is handed its own spelling here. Credentials, region and endpoint come from the usual AWS_*
environment variables, read at call time (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL[_S3]), and pyarrow's
retries from AWS_RETRY_MODE and AWS_MAX_ATTEMPTS, as every AWS SDK reads them.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from deltalake import DeltaTable
from pyarrow import fs as pafs

from routing_lib.config import project_path

_SCHEMES = ("s3a://", "s3://")
_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# pyarrow's own choice when given none: the SDK's standard mode, 3 attempts in all.
_RETRY_MODES = ("standard", "legacy")
DEFAULT_MAX_ATTEMPTS = 3


def is_remote(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(_SCHEMES)


def resolve(location: str | Path) -> str:
    """A URI as given (without a trailing slash); a local path as every path of the config
    (relative ones from the project root)."""
    if is_remote(location):
        return str(location).rstrip("/")
    return str(project_path(str(location)))


def join(base: str | Path, *parts: str) -> str:
    if is_remote(base):
        return "/".join([str(base).rstrip("/"), *parts])
    return str(Path(base).joinpath(*parts))


def _with_scheme(location: str, scheme: str) -> str:
    return scheme + location.split("://", 1)[1]


def spark_uri(location: str | Path) -> str:
    """What Spark opens: `s3://` becomes `s3a://` (Hadoop's S3 connector)."""
    return _with_scheme(str(location), "s3a://") if is_remote(location) else str(location)


def delta_uri(location: str | Path) -> str:
    """What delta-rs and pyarrow open: `s3a://` becomes `s3://`."""
    return _with_scheme(str(location), "s3://") if is_remote(location) else str(location)


def endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def retry_settings() -> tuple[str, int]:
    """The S3 client's retry mode and attempts in all (the first included), from AWS_RETRY_MODE
    (`standard`, the default: exponential backoff of up to 2^n s with jitter, a retry quota;
    `legacy`: 0, 50, 100, 200 ms... backoff) and AWS_MAX_ATTEMPTS, as the AWS SDKs read them."""
    mode = os.environ.get("AWS_RETRY_MODE", "").strip().lower() or "standard"
    if mode not in _RETRY_MODES:
        raise ValueError(f"AWS_RETRY_MODE={mode!r}: routelake's S3 client knows {_RETRY_MODES}")
    raw = os.environ.get("AWS_MAX_ATTEMPTS", "").strip() or str(DEFAULT_MAX_ATTEMPTS)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"AWS_MAX_ATTEMPTS={raw!r}: a whole number of attempts, at least 1")
    return mode, int(raw)


def retry_strategy(mode: str, attempts: int) -> pafs.S3RetryStrategy:
    """pyarrow's strategy for (mode, attempts in all). pyarrow's "default" strategy is the SDK's
    legacy one and counts retries after the first attempt; its standard one counts attempts."""
    if mode == "legacy":
        return pafs.AwsDefaultS3RetryStrategy(max_attempts=attempts - 1)
    return pafs.AwsStandardS3RetryStrategy(max_attempts=attempts)


def delta_storage_options(location: str | Path) -> dict[str, str] | None:
    """delta-rs storage_options for `location` (None for a local path)."""
    if not is_remote(location):
        return None
    options = {k: os.environ[k] for k in _CREDENTIALS if os.environ.get(k)}
    options["AWS_REGION"] = region()
    url = endpoint()
    if url:
        options["AWS_ENDPOINT_URL"] = url
        options["AWS_ALLOW_HTTP"] = str(url.startswith("http://")).lower()
    # Housekeeping commits (OPTIMIZE, VACUUM) need an atomic put-if-absent: S3 has one
    # (conditional writes); a store without it needs AWS_S3_ALLOW_UNSAFE_RENAME=true and a
    # single writer (docs/object-storage.md).
    for key in ("AWS_S3_ALLOW_UNSAFE_RENAME", "AWS_S3_LOCKING_PROVIDER", "AWS_CONDITIONAL_PUT"):
        if os.environ.get(key):
            options[key] = os.environ[key]
    return options


def open_delta(location: str | Path) -> DeltaTable:
    """A delta-rs table at a local path or an object-store URI (raises TableNotFoundError)."""
    return DeltaTable(delta_uri(location), storage_options=delta_storage_options(location))


def filesystem(location: str | Path) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path in it, for the few plain files read or written
    outside Delta (commit files, the checkpoint's offset log, the backfill's tick file)."""
    if not is_remote(location):
        return pafs.LocalFileSystem(), str(location)
    settings = (endpoint(), region(), *(os.environ.get(k) for k in _CREDENTIALS))
    return _s3(*settings, retry_settings()), str(location).split("://", 1)[1]


@functools.lru_cache(maxsize=4)
def _s3(
    url: str | None,
    region_: str,
    key: str | None,
    secret: str | None,
    token: str | None,
    retries: tuple[str, int] = ("standard", DEFAULT_MAX_ATTEMPTS),
) -> pafs.S3FileSystem:
    options: dict[str, str | None] = {"region": region_, "access_key": key, "secret_key": secret}
    if token:
        options["session_token"] = token
    if url:
        scheme, _, host = url.partition("://")
        options.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    return pafs.S3FileSystem(**options, retry_strategy=retry_strategy(*retries))


def is_dir(location: str | Path) -> bool:
    """A folder, or on object storage a prefix with objects under it (or a bucket)."""
    if not is_remote(location):
        return Path(location).is_dir()
    filesystem_, path = filesystem(location)
    found: bool = filesystem_.get_file_info(path.rstrip("/")).type == pafs.FileType.Directory
    return found


def exists(location: str | Path) -> bool:
    if not is_remote(location):
        return Path(location).exists()
    filesystem_, path = filesystem(location)
    found: bool = filesystem_.get_file_info(path).type != pafs.FileType.NotFound
    return found


def read_bytes(location: str | Path) -> bytes:
    """The file's bytes; FileNotFoundError (an OSError) when there is none. On object storage
    one read (pyarrow asks for the size, then GETs): a missing object fails the first request,
    so no HEAD is needed before it."""
    if not is_remote(location):
        return Path(location).read_bytes()
    filesystem_, path = filesystem(location)
    with filesystem_.open_input_stream(path) as stream:
        data: bytes = stream.read()
    return data


def read_text(location: str | Path) -> str:
    """The file's text; FileNotFoundError (an OSError) when there is none."""
    return read_bytes(location).decode()


def write_bytes(location: str | Path, data: bytes) -> None:
    """The whole file at once (on object storage one PUT, which replaces the object atomically
    and refreshes its LastModified)."""
    if not is_remote(location):
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        Path(location).write_bytes(data)
        return
    filesystem_, path = filesystem(location)
    with filesystem_.open_output_stream(path) as stream:
        stream.write(data)


def write_text(location: str | Path, text: str) -> None:
    write_bytes(location, text.encode())


def delete(location: str | Path) -> None:
    """Delete the file; FileNotFoundError when there is none."""
    if not is_remote(location):
        Path(location).unlink()
        return
    filesystem_, path = filesystem(location)
    filesystem_.delete_file(path)
