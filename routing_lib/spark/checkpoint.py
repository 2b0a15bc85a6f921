"""What the streaming checkpoint says about a micro-batch (read from its offset log), and how
this checkpoint's Spark watermarks read as the job's (the lead file, written at query start)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict

import pyarrow.fs as pafs
from deltalake.exceptions import TableNotFoundError

from routing_lib import storage
from routing_lib.core.catalog import PROGRESS
from routing_lib.spark.watermark import SPARK_LEAD_MS, WatermarkLead

log = logging.getLogger("routelake.checkpoint")

LEAD_FILE = "routelake-watermark.json"
# Python workers are reused across queries, so the key is the checkpoint.
_leads: dict[str, WatermarkLead] = {}


def batch_watermark(checkpoint: str, batch_id: int) -> int:
    """The job's event-time watermark for `batch_id` (0 before the first batch).

    Spark writes offsets/<id> (a version line, then the batch metadata as JSON) before it
    runs the batch, and never rewrites it, so this is the same on a replay after a crash.
    The checkpoint may be on object storage (s3a://).
    """
    if batch_id < 0:
        return 0
    return watermark_lead(checkpoint).job_watermark(
        batch_id, _spark_watermark(checkpoint, batch_id)
    )


def watermark_lead(checkpoint: str) -> WatermarkLead:
    """The checkpoint's lead file, read once per process; none: the lead from batch 0."""
    if checkpoint not in _leads:
        try:
            text = storage.read_text(storage.join(checkpoint, LEAD_FILE))
        except FileNotFoundError:
            _leads[checkpoint] = WatermarkLead()
        else:
            _leads[checkpoint] = WatermarkLead(**json.loads(text))
    return _leads[checkpoint]


def ensure_watermark_lead(checkpoint: str, warehouse: str) -> WatermarkLead:
    """Write the checkpoint's lead file unless it has one: called by the driver before the
    query starts. A new checkpoint gets the lead from batch 0. A checkpoint without the file
    but with batches was written by an earlier version: by one with the lead already (its
    published watermarks, the progress rows, are Spark's minus 1), or by one from before it
    (they are Spark's). The latter's batches keep their watermarks and the next ones never
    read below the last: without that, its published W would read W - 1, and an event at
    exactly W, late, would be applied."""
    path = storage.join(checkpoint, LEAD_FILE)
    _leads.pop(checkpoint, None)
    if storage.exists(path):
        return watermark_lead(checkpoint)
    lead = WatermarkLead()
    batches = batch_ids(checkpoint, "offsets")
    if batches and _written_without_lead(checkpoint, warehouse):
        last = max(batches)
        lead = WatermarkLead(since_batch=last + 1, floor_ms=_spark_watermark(checkpoint, last))
        log.warning(
            "checkpoint %s was written before Spark's watermark ran %d ms ahead: batches up to "
            "%d keep theirs, and the job's watermark stays at or above %d",
            checkpoint,
            SPARK_LEAD_MS,
            last,
            lead.floor_ms,
        )
    storage.write_text(path, json.dumps(asdict(lead)))
    _leads[checkpoint] = lead
    return lead


def _written_without_lead(checkpoint: str, warehouse: str) -> bool:
    """Whether the published watermarks of the checkpoint's latest committed batch with one
    above 0 are Spark's own (written before the lead). No such batch: nothing was published
    at a watermark the lead could move, so the lead applies from the start."""
    for batch_id in sorted(batch_ids(checkpoint, "commits"), reverse=True):
        spark_ms = _spark_watermark(checkpoint, batch_id)
        if spark_ms <= SPARK_LEAD_MS:
            continue
        published = _published_watermarks(warehouse, batch_id)
        if spark_ms - SPARK_LEAD_MS in published:
            return False
        if spark_ms in published:
            return True
    return False


def _published_watermarks(warehouse: str, batch_id: int) -> set[int]:
    """The watermarks of route_progress's rows of a batch id (another checkpoint's rows may
    share the id: the caller looks for one value or the other)."""
    try:
        table = storage.open_delta(storage.join(warehouse, PROGRESS))
    except TableNotFoundError:
        return set()
    rows = table.to_pyarrow_table(columns=["watermark"], filters=[("batch_id", "=", batch_id)])
    return {int(w) for w in rows.column("watermark").to_pylist()}


def _spark_watermark(checkpoint: str, batch_id: int) -> int:
    lines = storage.read_text(storage.join(checkpoint, "offsets", str(batch_id))).splitlines()
    return int(json.loads(lines[1]).get("batchWatermarkMs", 0))


def batch_ids(checkpoint: str, log_name: str) -> list[int]:
    """The batch ids of one of Spark's logs (offsets, commits): its files named by number."""
    filesystem, path = storage.filesystem(storage.join(checkpoint, log_name))
    selector = pafs.FileSelector(path, allow_not_found=True)
    return [
        int(info.base_name)
        for info in filesystem.get_file_info(selector)
        if info.base_name.isdigit()
    ]
