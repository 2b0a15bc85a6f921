"""The content store's durable backend: one file per reference under the job's checkpoint.

`<checkpoint>/content/<first two digest digits>/<digest>`, written once per content (a temporary
file renamed into place, then the folder fsynced, locally; one unconditional PUT on object
storage, which is atomic) and never changed, so concurrent or retried writers of one reference
are harmless: they write the same bytes.

Every storage call is retried (`attempts`, exponential backoff from `backoff_s`) and then
raises ContentStorageError, which fails the task: Spark retries it, and past its retries the
query stops with the message. Every read checks the bytes against the digest they are stored
under (CorruptContentError). Neither ever becomes a dead letter (routing_lib/core/content.py,
CONTENT_FAILURES).

Writing an existing file refreshes its modification time (a touch locally, the PUT itself on
object storage): the collector (routing_lib/content_gc.py) keeps any file touched within its
grace period, and the store re-ensures a file at least every `freshness_s` seconds before it
lets a reference to it leave the process.

On object storage the collector cannot rename a file out of a writer's way as it does locally;
it puts a tombstone (`.gc-<digest>`, saying "sweeping") beside an object before it checks the
object's date, and makes it say "deleted" once it deleted the object (a kept object leaves it
saying "sweeping"). A writer reads the tombstone after its PUT: with none, no collection that
checked the object before the PUT is under way or recent, and any later one sees the fresh
date; otherwise it waits until the tombstone says "deleted" or has said "sweeping" for
TOMBSTONE_WAIT_S, and PUTs again, since a DELETE may have followed its PUT.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

import pyarrow

from routing_lib import storage
from routing_lib.core.content import (
    CONTENT,
    RECOVERY_HINT,
    ContentBackend,
    ContentStorageError,
    CorruptContentError,
    content_digest,
    in_parallel,
)

log = logging.getLogger("routelake.content")

CONTENT_FOLDER = "content"
TEMPORARY_PREFIX = ".tmp-"
TOMBSTONE_PREFIX = ".gc-"
# What an object store's tombstone says: the collector is checking the object, or deleted it.
TOMBSTONE_SWEEPING = b"sweeping"
TOMBSTONE_DELETED = b"deleted"
# How long a tombstone may say "sweeping" while a collection is at work on its object (normally
# milliseconds: a HEAD and a DELETE); past it, the collection kept the object, failed or died,
# and a writer PUTs again without waiting.
TOMBSTONE_WAIT_S = 30.0
_TOMBSTONE_POLL_S = 0.05
DEFAULT_ATTEMPTS = 5
DEFAULT_BACKOFF_S = 0.2

_Result = TypeVar("_Result")


@dataclass(frozen=True)
class ContentSettings:
    """Where a query's content lives, from which size a value goes there, and how hard a
    storage call is retried ([spark] content_io_attempts, content_io_backoff_s)."""

    location: str  # the folder (local path or s3:// URI)
    min_chars: int  # values shorter than this stay inline
    attempts: int = DEFAULT_ATTEMPTS
    backoff_s: float = DEFAULT_BACKOFF_S

    def backend(self) -> ContentBackend:
        return CONTENT.attach(ContentFolder(self.location, self.attempts, self.backoff_s))


def content_settings(
    checkpoint: str,
    min_chars: int,
    attempts: int = DEFAULT_ATTEMPTS,
    backoff_s: float = DEFAULT_BACKOFF_S,
) -> ContentSettings:
    return ContentSettings(storage.join(checkpoint, CONTENT_FOLDER), min_chars, attempts, backoff_s)


def checkpoint_of(location: str) -> str:
    """The checkpoint a content folder belongs to (its parent)."""
    return location.rstrip("/").rsplit("/", 1)[0]


def content_path(location: str, digest: str) -> str:
    return storage.join(location, digest[:2], digest)


class ContentFolder:
    def __init__(
        self, location: str, attempts: int = DEFAULT_ATTEMPTS, backoff_s: float = DEFAULT_BACKOFF_S
    ):
        self.name = location
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self._remote = storage.is_remote(location)

    def _path(self, ref: str) -> str:
        return content_path(self.name, ref[1:])

    def describe(self, ref: str) -> str:
        return f"file {self._path(ref)} of checkpoint {checkpoint_of(self.name)} is missing"

    # -- reading -----------------------------------------------------------------------------
    def read(self, ref: str) -> str | None:
        path = self._path(ref)
        data = self._retrying(f"reading {path}", lambda: _read_bytes(path))
        if data is None:
            return None
        # The digest over the raw bytes first: a damaged file (a flipped byte, not UTF-8 any
        # more; a truncation; another file's bytes) is corrupt content, which stops the job with
        # this message, never a decoding error that a guard would take for the event's fault.
        # A chunked reference names its manifest by the same digest under another mark.
        found = content_digest(data)
        if found != ref[1:]:
            raise CorruptContentError(
                f"corrupt content for reference {ref[1:]}: file {path} of checkpoint "
                f"{checkpoint_of(self.name)} holds {len(data)} bytes whose BLAKE2b digest is "
                f"{found}. {RECOVERY_HINT}"
            )
        return data.decode("utf-8", "surrogatepass")  # the bytes `write` encoded

    # -- writing -----------------------------------------------------------------------------
    def write(self, ref: str, text: str) -> None:
        path = self._path(ref)
        data = text.encode("utf-8", "surrogatepass")
        writer = self._put if self._remote else self._write_local
        self._retrying(f"writing {path}", lambda: writer(path, data))

    def write_many(self, items: list[tuple[str, str]]) -> None:
        """Write these (reference, text) items: a new table's chunks (~88 for 8 000 topics).

        Locally the fsyncs are batched, each file's order kept as `write` keeps it (its data
        durable before its name, its name durable before this returns): every new file is
        written under its temporary name, their data fsynced side by side, each renamed into
        place, then each folder fsynced once. Concurrent fsyncs share the file system's
        journal commits; one write per thread paid a commit per fsync, two per file (88
        chunks: 23-56 ms -> 14-30 ms here, the 60 x 8 000 backfill writes 5 665 chunks). On
        object storage: one PUT each, side by side."""
        if self._remote:
            in_parallel([partial(self.write, ref, text) for ref, text in items])
            return
        pending: list[tuple[str, str]] = []  # (temporary, target) of the files not there yet
        folders: set[Path] = set()  # where they go
        try:
            for ref, text in items:
                path = self._path(ref)
                data = text.encode("utf-8", "surrogatepass")
                temporary = self._retrying(f"writing {path}", partial(_unsynced, path, data))
                if temporary is not None:
                    pending.append((temporary, path))
                    folders.add(Path(path).parent)
            in_parallel(
                [partial(self._retrying, f"writing {p}", partial(_fsync, t)) for t, p in pending]
            )
            while pending:
                temporary, path = pending[0]
                self._retrying(f"writing {path}", partial(os.replace, temporary, path))
                pending.pop(0)
        finally:
            for temporary, _ in pending:  # not renamed: a failure above, which is raised
                Path(temporary).unlink(missing_ok=True)
        in_parallel([partial(self._retrying, f"writing {f}", partial(_fsync, f)) for f in folders])

    @staticmethod
    def _put(path: str, data: bytes) -> None:
        # One unconditional PUT, no HEAD first: an object PUT is atomic and the bytes are the
        # same whoever writes them, and rewriting an existing object refreshes its
        # LastModified, which the collector's grace period counts from. A conditional PUT
        # (If-None-Match: *) would leave an old object's date as it is; pyarrow cannot send
        # it anyway.
        storage.write_bytes(path, data)
        if _maybe_deleted_after_put(path):
            storage.write_bytes(path, data)

    @staticmethod
    def _write_local(path: str, data: bytes) -> None:
        temporary = _unsynced(path, data)
        if temporary is None:  # there already: its date refreshed for the collector
            return
        try:
            _fsync(temporary)  # durable before its name is
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        # the rename is durable only once the folder's entry is
        _fsync(Path(path).parent)

    # -- retries -----------------------------------------------------------------------------
    def _retrying(self, what: str, call: Callable[[], _Result]) -> _Result:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                return call()
            except (OSError, pyarrow.ArrowException) as exc:
                if attempt == self.attempts:
                    raise ContentStorageError(
                        f"content store: {what} failed {self.attempts} times, last with "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                log.warning(
                    "content store: %s failed (%r); retry %d in %.2fs", what, exc, attempt, delay
                )
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")


def tombstone_path(path: str) -> str:
    """The collector's tombstone beside a content file (same folder, TOMBSTONE_PREFIX)."""
    folder, name = path.rsplit("/", 1)
    return f"{folder}/{TOMBSTONE_PREFIX}{name}"


def _maybe_deleted_after_put(path: str) -> bool:
    """Whether a collection may have deleted the object at `path` after this writer's PUT: a
    tombstone is there (module docstring). Waits while it says "sweeping", until it has said so
    for TOMBSTONE_WAIT_S (a collection that kept the object, failed or died leaves it so)."""
    tombstone = tombstone_path(path)
    state = _read_tombstone(tombstone)
    while state is not None and state[0] == TOMBSTONE_SWEEPING:
        if time.time() - state[1] > TOMBSTONE_WAIT_S:
            log.info("content store: %s has said sweeping since %s", tombstone, state[1])
            break
        time.sleep(_TOMBSTONE_POLL_S)
        state = _read_tombstone(tombstone)
    return state is not None


def _read_tombstone(location: str) -> tuple[bytes, float] | None:
    """An object's bytes and its LastModified (seconds since the epoch); None if missing."""
    filesystem, path = storage.filesystem(location)
    try:
        with filesystem.open_input_stream(path) as stream:
            data: bytes = stream.read()
            stamp = stream.metadata().get("Last-Modified", b"").decode()
    except FileNotFoundError:
        return None
    return data, _timestamp(stamp)


def _timestamp(last_modified: str) -> float:
    """S3's Last-Modified as pyarrow hands it (2026-11-27T14:07:07Z); now when absent."""
    try:
        moment = datetime.strptime(last_modified, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return time.time()
    return moment.replace(tzinfo=UTC).timestamp()


def _read_bytes(path: str) -> bytes | None:
    try:
        return storage.read_bytes(path)
    except FileNotFoundError:
        return None


def _unsynced(path: str, data: bytes) -> str | None:
    """`data` in a new temporary file beside `path`, not yet fsynced (its name is returned);
    None when `path` is there already (its date refreshed, as `write` does)."""
    target = Path(path)
    try:
        os.utime(target)
        return None
    except FileNotFoundError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=TEMPORARY_PREFIX)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def _fsync(path: str | Path) -> None:
    """fsync a file's data, or a folder's entries (a rename is durable once they are)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
