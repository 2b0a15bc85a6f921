"""The checkpoint's group states for `routectl migrate`: each broker group's base and overlay
(format 2/3 of core/codec.py, unchanged by issue 36), read from the state of the last
committed batch with Spark's state data source (`statestore`, as content_gc reads it).

The migrated topic_base / topic_overlay must be these, not topic_queue_table's effective
rows: the job's next facts are changes of them (routing_lib/migrate_facts.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from routing_lib import storage
from routing_lib.content_files import CONTENT_FOLDER, ContentFolder
from routing_lib.core.admin import ADMIN_KEY, KV_KEY
from routing_lib.core.codec import decode_clock
from routing_lib.core.content import CONTENT
from routing_lib.core.overlay import GroupTopics
from routing_lib.core.step import SavedGroup
from routing_lib.ingest import CLOCK_KEY, DEAD_LETTER_KEY, TICK_KEY
from routing_lib.migrate import committed_batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# State keys that are not broker groups (routing_lib/ingest.py, core/admin.py).
_NOT_GROUPS = frozenset({ADMIN_KEY, KV_KEY, CLOCK_KEY, DEAD_LETTER_KEY, TICK_KEY})
_FIELDS = SavedGroup.__dataclass_fields__.keys()  # clock, topics, history, topic_history


def has_state(checkpoint: str) -> bool:
    return storage.is_dir(storage.join(checkpoint, "state"))


def group_states(saved: Mapping[str, SavedGroup]) -> dict[str, GroupTopics]:
    """Each group's base + overlay from its saved state (content references resolved by the
    attached backend)."""
    return {
        group: decode_clock((s.clock, CONTENT.resolve(s.topics))).routes.topic_state
        for group, s in saved.items()
        if group not in _NOT_GROUPS and s.clock
    }


def read_saved_groups(spark: SparkSession, checkpoint: str) -> dict[str, SavedGroup]:
    """The saved state of every key at the checkpoint's last committed batch."""
    batches = committed_batches(checkpoint)
    if not batches:
        raise RuntimeError(f"checkpoint {checkpoint} has state but no committed batch")
    frame = (
        spark.read.format("statestore")
        .option("batchId", max(batches))
        .load(storage.spark_uri(checkpoint))
    )
    saved: dict[str, SavedGroup] = {}
    for row in frame.select("key", "value").toLocalIterator():
        key = row["key"][0]
        value = row["value"].asDict(recursive=True)
        state = value.get("groupState", value)  # applyInPandasWithState nests the user's row
        if isinstance(state, Mapping) and "clock" not in state:
            state = next(iter(state.values()))
        saved[key] = SavedGroup(**{name: state.get(name) for name in _FIELDS})
    return saved


def checkpoint_states(spark: SparkSession, checkpoint: str) -> dict[str, GroupTopics]:
    CONTENT.attach(ContentFolder(storage.join(checkpoint, CONTENT_FOLDER)))
    return group_states(read_saved_groups(spark, checkpoint))
