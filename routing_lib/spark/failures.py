"""A failed streaming query, told in one sentence an operator can act on.

Spark reports a failure as a StreamingQueryException whose text is the whole Java stack trace
(often hundreds of lines, the cause near the bottom, Python tracebacks of foreachBatch in the
middle). Two failures a deployment meets have a known cause and a known remedy: a full disk
under the warehouse or the checkpoint, and a Kafka broker that stayed unreachable longer than
the Kafka source waits. `explain` names them; anything else keeps Spark's own first line.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from routing_lib import storage

# How ENOSPC reads in each layer that writes here: the JVM (Hadoop's local file system,
# Spark's checkpoint files), RocksDB (the state store), Rust (delta-rs) and Python.
_DISK_FULL = re.compile(r"No space left on device|ENOSPC|os error 28|Errno 28", re.IGNORECASE)
# The Kafka clients' words for "no broker answered in time" (admin client on the driver, the
# consumers of the executors) and Spark's when a fetch gives up.
_KAFKA_GONE = re.compile(
    r"org\.apache\.kafka\.common\.errors\.TimeoutException"
    r"|Cannot fetch record for offset"
    r"|Timed out waiting for a node assignment"
)
_PATH_IN_TEXT = re.compile(r"(?:file:)?(/[^\s'\"`,;:()\[\]]+)")
DOC = "docs/troubleshooting.md"


@dataclass(frozen=True)
class JobPlaces:
    """Where the job writes and reads: what a failure message names."""

    warehouse: str
    checkpoint: str
    kafka: str  # bootstrap servers
    topic: str


class StreamJobFailure(RuntimeError):
    """The streaming query stopped with an error; the message says what to do."""

    def __init__(self, summary: str, detail: str) -> None:
        super().__init__(summary)
        self.summary = summary
        self.detail = detail  # Spark's full error text, for the log


def explain(error: str, places: JobPlaces) -> str:
    """One paragraph for the operator: the cause when it is known, else Spark's first line."""
    content = _CONTENT_FAILURE.search(error)
    if content is not None:
        return _content_failure(content.group(1), content.group(2).strip(), places)
    if _DISK_FULL.search(error):
        return _disk_full(error, places)
    if _KAFKA_GONE.search(error):
        return (
            f"Kafka at {places.kafka} (topic {places.topic}) did not answer in time, so the "
            "streaming query gave up. The tables keep their last published batch. Restart "
            "the job once the broker is reachable: it resumes from its checkpoint at the "
            f"first offset it had not published, and nothing is written twice (see {DOC})."
        )
    return f"streaming query failed: {_first_line(error)}"


# The content store's errors (routing_lib/core/content.py) as a Python traceback prints them
# inside Spark's text: their message names the reference, the file, the checkpoint and the fix.
_CONTENT_FAILURE = re.compile(
    r"\b(MissingContentError|CorruptContentError|ContentStorageError): ([^\n]+)"
)


def _content_failure(kind: str, message: str, places: JobPlaces) -> str:
    if kind == "ContentStorageError":
        return (
            f"the content store under checkpoint {places.checkpoint} kept failing: {message}. "
            "Spark retried the task and gave up; nothing was dead-lettered or published for "
            "the unfinished micro-batch. Once the storage answers again, restart the job: it "
            f'resumes from its checkpoint (see {DOC}, "Missing or corrupt content").'
        )
    what = "missing" if kind == "MissingContentError" else "corrupt"
    return (
        f"content {what} under checkpoint {places.checkpoint}: {message} The streaming query "
        "stopped before publishing the micro-batch that needed it; the tables keep their last "
        "published batch."
    )


# Where a write failed when the error names no file: the frames of the trace say which part
# of the checkpoint (or the warehouse) was being written.
_WRITERS = (
    ("markMicroBatchStart", "checkpoint", "offsets"),
    ("markMicroBatchEnd", "checkpoint", "commits"),
    ("RocksDB", "checkpoint", "state"),
    ("StateStore", "checkpoint", "state"),
    ("delta_writer.py", "warehouse", ""),
    ("DeltaError", "warehouse", ""),
)


def _disk_full(error: str, places: JobPlaces) -> str:
    named = _full_path(error, places) or _writer_of(error, places)
    full = [f"{where} {path}" for where, path in _local_places(places)]
    spaces = "; ".join(f"{what}: {_free(path)}" for what, path in _local_places(places))
    where = f"writing {named}" if named else "under " + " and ".join(full)
    return (
        f"disk full: no space left on device {where} ({spaces}). The streaming query "
        "stopped; every table keeps its last committed version and stays readable (the "
        "lookup goes on serving it). Free space on that file system (or move the warehouse "
        "and checkpoint to a larger one), then restart the job: it resumes from its "
        f"checkpoint and replays the unfinished micro-batch without writing anything twice "
        f"(see {DOC})."
    )


def _local_places(places: JobPlaces) -> list[tuple[str, str]]:
    return [
        (what, path.removeprefix("file:"))
        for what, path in (("warehouse", places.warehouse), ("checkpoint", places.checkpoint))
        if not storage.is_remote(path)
    ]


def _full_path(error: str, places: JobPlaces) -> str | None:
    """The first file under the warehouse or the checkpoint that the error text names: the
    one whose write failed, as each layer names the file it was writing."""
    roots = [str(Path(path).resolve()) for _, path in _local_places(places)]
    for line in error.splitlines():
        if not _DISK_FULL.search(line):
            continue
        for match in _PATH_IN_TEXT.finditer(line):
            candidate = match.group(1).rstrip(".")
            if any(candidate.startswith(root) for root in roots):
                return candidate
    for match in _PATH_IN_TEXT.finditer(error):  # the path is on another line of the trace
        candidate = match.group(1).rstrip(".")
        if any(candidate.startswith(root + "/") for root in roots):
            return candidate
    return None


def _writer_of(error: str, places: JobPlaces) -> str | None:
    local = dict(_local_places(places))
    for frame, place, below in _WRITERS:
        if frame in error and place in local:
            return f"{local[place]}/{below}".rstrip("/")
    return None


def _free(path: str) -> str:
    """'X MiB free of Y MiB' for the file system holding `path` (its nearest existing
    ancestor: the failed write may not have created it)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as exc:
        return f"free space unknown ({exc.strerror})"
    return f"{usage.free / 2**20:.1f} MiB free of {usage.total / 2**20:.0f} MiB"


def _first_line(error: str) -> str:
    for line in error.splitlines():
        if line.strip():
            return line.strip()
    return "(no message)"
