"""What the streaming checkpoint says about a micro-batch (read from its offset log)."""

from __future__ import annotations

import json

from routing_lib import storage
from routing_lib.spark.watermark import job_watermark


def batch_watermark(checkpoint: str, batch_id: int) -> int:
    """The job's event-time watermark for `batch_id` (0 before the first batch).

    Spark writes offsets/<id> (a version line, then the batch metadata as JSON) before it
    runs the batch, and never rewrites it, so this is the same on a replay after a crash.
    The checkpoint may be on object storage (s3a://).
    """
    if batch_id < 0:
        return 0
    lines = storage.read_text(storage.join(checkpoint, "offsets", str(batch_id))).splitlines()
    return job_watermark(int(json.loads(lines[1]).get("batchWatermarkMs", 0)))
