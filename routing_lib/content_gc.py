"""The content store's collector: deletes content files nothing can refer to any more.

A content file (routing_lib/content_files.py) may be needed by a reference in
- a state version Spark can still load (every version from the state store's oldest retained
  one, `spark.sql.streaming.minBatchesToRetain` back, to its newest committed one): a group's
  topics or open intervals, or a pending registration's topic table inside its clock;
- a micro-batch that has not committed yet (stage one's output in the shuffle, a step's new
  state not committed yet), and any later batch;
- a Python worker's memory (its cache of texts, its known-records templates).

Mark: the digests named anywhere in the retained state versions, read with Spark's state data
source (the oldest retained version in full plus the change feed of every later one), and the
chunks listed by the manifests of the chunked references among them. Sweep: a
file is deleted only if its digest is not marked AND it was last written before
`started - grace_s`, where `started` is taken before the mark. Every way a reference reaches a
future state version other than through a marked one passes through the store's `ensure`, which
writes or touches the file within `CONTENT.freshness_s` of the reference leaving the process;
so with a grace longer than that plus the longest micro-batch with its retries, no such file is
old enough to go (the argument in full: docs/architecture.md, "Collecting content").

Locally a victim is first renamed to a tombstone (atomic): a writer touching it before the
rename leaves a fresh date on the tombstone, which is then renamed back; a writer after the
rename finds no file and writes it anew. Object storage has no rename: a tombstone object
saying "sweeping" is put beside the victim before its date is checked, and says "deleted"
once the victim is deleted (a kept victim leaves it as it is); a writer reads it after every
PUT and PUTs again when a collection may have deleted the object after its PUT
(routing_lib/content_files.py). Temporary files
(`.tmp-*`) of crashed writers and tombstones older than the grace period go too.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyarrow import fs as pafs

from routing_lib import storage
from routing_lib.content_files import (
    CONTENT_FOLDER,
    TEMPORARY_PREFIX,
    TOMBSTONE_DELETED,
    TOMBSTONE_PREFIX,
    TOMBSTONE_SWEEPING,
    ContentFolder,
    tombstone_path,
)
from routing_lib.core.content import (
    CONTENT,
    MANIFEST_MARK,
    CorruptContentError,
    manifest_digests,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("routelake.content_gc")

_DIGEST = re.compile(r"^[0-9a-f]{32}$")
# A reference in a state value as the value's JSON (Spark's to_json) shows it: the marker
# character itself, or escaped once or more (a pending event's packed form sits inside the
# clock's JSON: "\\u001d<digest>"), then the digest. Java and Python read it the same way.
# Both marks: a plain reference (1d) and a chunked one (1c, its manifest's digest).
DIGEST_IN_TEXT = "(?:[\x1c\x1d]|u001[cCdD])([0-9a-f]{32})"
# A chunked reference only: its manifest is read and the chunks it lists are marked too.
MANIFEST_IN_TEXT = "(?:\x1c|u001[cC])([0-9a-f]{32})"
# A running job purges its oldest offset-log entry at each batch (the in-job collection runs
# beside it): the entry the mark starts from can go between listing the log and Spark's read
# of it, which then fails with this condition. The mark is taken again, one more of the
# oldest versions left out each time (they are being purged: no restart can load them).
OFFSET_LOG_GONE = "STDS_OFFSET_LOG_UNAVAILABLE"
PURGE_RACE_ATTEMPTS = 5


@dataclass
class ContentReport:
    """What one collection found and did (dry run: what it would delete)."""

    marked: int = 0  # digests the retained state versions name
    kept_files: int = 0
    kept_bytes: int = 0
    deleted_files: int = 0
    deleted_bytes: int = 0
    deleted_temporaries: int = 0
    deleted: list[str] = field(default_factory=list)

    def line(self, dry_run: bool) -> str:
        verb = "would delete" if dry_run else "deleted"
        return (
            f"content: {self.kept_files} files ({self.kept_bytes} bytes) kept, {self.marked} "
            f"referenced by state; {verb} {self.deleted_files} files ({self.deleted_bytes} "
            f"bytes) and {self.deleted_temporaries} temporary files"
        )


@dataclass(frozen=True)
class _Entry:
    path: str
    name: str
    size: int
    mtime: float  # seconds since the epoch


def check_grace(grace_s: float) -> None:
    """The grace period must outlast the store's freshness window with room for a batch."""
    if grace_s < 2 * CONTENT.freshness_s:
        raise ValueError(
            f"content grace period {grace_s:g} s is too short: it must exceed the longest "
            f"micro-batch with its retries plus {CONTENT.freshness_s:g} s, and be at least "
            f"{2 * CONTENT.freshness_s:g} s"
        )


class CollectionRefused(RuntimeError):
    """The checkpoint cannot be collected safely; nothing was deleted."""


def require_state(checkpoint: str) -> None:
    """Refuse a checkpoint without its `state/` folder: no state version could mark anything,
    so every old file would look unreferenced (a restore that has copied `content/` but not
    `state/` yet, or a path that is not the job's checkpoint)."""
    if not storage.is_dir(storage.join(checkpoint, "state")):
        raise CollectionRefused(
            f"checkpoint {checkpoint} has no state/ folder: no state version can be read to "
            "mark the content it names, so nothing is collected. If a restore is in progress, "
            "finish it (state/ with content/); otherwise pass the job's --checkpoint"
        )


def live_digests(spark: SparkSession, checkpoint: str) -> set[str]:
    """Every digest the state versions Spark can still load name (CollectionRefused without
    a state folder)."""
    require_state(checkpoint)
    location = storage.spark_uri(checkpoint)
    meta = spark.read.format("state-metadata").load(location).collect()
    if not meta:  # a state folder whose versions cannot be listed: mark nothing, delete nothing
        raise RuntimeError(f"no state metadata under {checkpoint}/state: nothing collected")
    digests: set[str] = set()
    manifests: set[str] = set()
    for operator in meta:
        for attempt in range(PURGE_RACE_ATTEMPTS):
            try:
                _mark_operator(spark, location, operator, checkpoint, attempt, digests, manifests)
                break
            except Exception as exc:  # noqa: BLE001  only the purge race is retried
                if OFFSET_LOG_GONE not in str(exc) or attempt + 1 == PURGE_RACE_ATTEMPTS:
                    raise
                log.info("offset log purged under the mark (attempt %d): again", attempt + 1)
    return digests | chunk_digests(storage.join(checkpoint, CONTENT_FOLDER), manifests)


def _mark_operator(
    spark: SparkSession,
    location: str,
    operator: Any,
    checkpoint: str,
    skipped: int,
    digests: set[str],
    manifests: set[str],
) -> None:
    """Add the digests and manifests one operator's loadable versions name: the oldest in
    full, the later ones' changes. `skipped`: how many of the oldest loadable versions to
    leave out (a running job purges one a batch; see PURGE_RACE_ATTEMPTS)."""
    from pyspark.sql import functions as F

    first, last = int(operator["minBatchId"]), int(operator["maxBatchId"])
    # Spark purges the offset log at a batch's commit, but deletes old state files only in
    # the store's maintenance, later: after a crash in between, the oldest state versions
    # have no offset log left, and the state reader refuses them. No query can load those
    # versions either (a restart starts from the offset log), so the mark starts at the
    # oldest version that has one.
    first = max(first, min(loadable_from(checkpoint) + skipped, last))
    frames = [
        spark.read.format("statestore")
        .option("operatorId", operator["operatorId"])
        .option("batchId", first)
        .load(location)
    ]
    if last > first:
        frames.append(
            spark.read.format("statestore")
            .option("operatorId", operator["operatorId"])
            .option("readChangeFeed", "true")
            .option("changeStartBatchId", first + 1)
            .option("changeEndBatchId", last)
            .load(location)
            .where(F.col("change_type") == "update")
            .select("key", "value", "partition_id")
        )
    for frame in frames:
        text = F.to_json(F.col("value"))  # every column, escapes and all
        for pattern, found_in in ((DIGEST_IN_TEXT, digests), (MANIFEST_IN_TEXT, manifests)):
            found = (
                frame.select(F.explode(F.regexp_extract_all(text, F.lit(pattern), 1)))
                .distinct()
                .collect()
            )
            found_in.update(row[0] for row in found)


def loadable_from(checkpoint: str) -> int:
    """The oldest batch id the checkpoint's offset log still holds (0 when it is empty)."""
    from routing_lib.spark.checkpoint import batch_ids

    return min(batch_ids(checkpoint, "offsets"), default=0)


def chunk_digests(location: str, manifests: Iterable[str]) -> set[str]:
    """The chunks the manifests of these chunked references list (a manifest whose file is
    gone lists nothing: the job stops on that reference whatever is kept)."""
    folder = ContentFolder(location)
    chunks: set[str] = set()
    for digest in manifests:
        try:
            text = folder.read(MANIFEST_MARK + digest)
        except CorruptContentError:
            continue  # a damaged manifest: keep what it may name by age only, as before
        listed = manifest_digests(text) if text is not None else None
        chunks.update(listed or [])
    return chunks


def collect_content(
    spark: SparkSession,
    checkpoint: str,
    grace_s: float,
    dry_run: bool = False,
) -> ContentReport:
    """Mark the retained state versions' references, then sweep the checkpoint's content."""
    check_grace(grace_s)
    started = time.time()  # before the mark: see the module's note
    live = live_digests(spark, checkpoint)
    return sweep(storage.join(checkpoint, CONTENT_FOLDER), live, started, grace_s, dry_run)


def sweep(
    location: str, live: set[str], started: float, grace_s: float, dry_run: bool = False
) -> ContentReport:
    """Delete the files under `location` that `live` does not name and that were last written
    before `started - grace_s`, and temporary files as old."""
    report = ContentReport(marked=len(live))
    cutoff = started - grace_s
    remote = storage.is_remote(location)
    for entry in _entries(location):
        if entry.name.startswith((TEMPORARY_PREFIX, TOMBSTONE_PREFIX)):
            if entry.mtime < cutoff and (dry_run or _delete(entry.path, remote)):
                report.deleted_temporaries += 1
            continue
        if not _DIGEST.match(entry.name):
            continue  # not ours: leave it
        if entry.name in live or entry.mtime >= cutoff:
            report.kept_files += 1
            report.kept_bytes += entry.size
            continue
        if dry_run or _retire(entry, cutoff, remote):
            report.deleted_files += 1
            report.deleted_bytes += entry.size
            report.deleted.append(entry.name)
        else:
            report.kept_files += 1
            report.kept_bytes += entry.size
    return report


def _entries(location: str) -> Iterator[_Entry]:
    if storage.is_remote(location):
        filesystem, root = storage.filesystem(location)
        selector = pafs.FileSelector(root, allow_not_found=True, recursive=True)
        for info in filesystem.get_file_info(selector):
            if info.type == pafs.FileType.File:
                mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
                yield _Entry("s3://" + info.path, info.base_name, info.size or 0, mtime)
        return
    folder = Path(location)
    if not folder.is_dir():
        return
    for shard in folder.iterdir():
        if not shard.is_dir():
            continue
        for child in shard.iterdir():
            try:
                status = child.stat()
            except FileNotFoundError:  # renamed or deleted meanwhile
                continue
            yield _Entry(str(child), child.name, status.st_size, status.st_mtime)


def _retire(entry: _Entry, cutoff: float, remote: bool) -> bool:
    """Delete an unreferenced old content file unless a writer refreshed it meanwhile."""
    if remote:
        return _retire_object(entry.path, cutoff)
    path = Path(entry.path)
    tombstone = Path(tombstone_path(entry.path))
    try:
        os.rename(path, tombstone)
    except FileNotFoundError:
        return False
    if tombstone.stat().st_mtime >= cutoff:  # touched before the rename: it is wanted
        try:
            os.link(tombstone, path)  # never over a file a writer wrote since
        except FileExistsError:
            pass
        tombstone.unlink()
        return False
    tombstone.unlink()
    return True


def _retire_object(path: str, cutoff: float) -> bool:
    """The object-storage form of `_retire`: the tombstone first, so that a writer whose PUT
    lands between the date check and the DELETE finds it and PUTs again.

    Only a DELETE done changes it ("deleted"); a kept object, or a failure, leaves it saying
    "sweeping": another collection may be between its own check and DELETE of this object and
    share the tombstone, so nothing else may tell writers that no DELETE is coming. Writers
    stop waiting on "sweeping" once it is TOMBSTONE_WAIT_S old (content_files.py)."""
    tombstone = tombstone_path(path)
    storage.write_bytes(tombstone, TOMBSTONE_SWEEPING)
    deleted = _delete_if_not_touched(path, cutoff)
    if deleted:
        storage.write_bytes(tombstone, TOMBSTONE_DELETED)  # stays until older than the grace
    return deleted


def _delete_if_not_touched(path: str, cutoff: float) -> bool:
    filesystem, key = storage.filesystem(path)
    info = filesystem.get_file_info(key)
    if info.type != pafs.FileType.File or (
        info.mtime is not None and info.mtime.timestamp() >= cutoff
    ):
        return False
    filesystem.delete_file(key)
    return True


def _delete(path: str, remote: bool) -> bool:
    try:
        if remote:
            filesystem, key = storage.filesystem(path)
            filesystem.delete_file(key)
        else:
            Path(path).unlink()
    except FileNotFoundError:
        return False
    return True


def content_size(location: str) -> tuple[int, int]:
    """(files, bytes) of the content under `location`, temporary files included."""
    files = size = 0
    for entry in _entries(location):
        files += 1
        size += entry.size
    return files, size
