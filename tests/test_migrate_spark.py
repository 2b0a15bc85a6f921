"""The checkpoint's group states as `routectl migrate` reads them (routing_lib/migrate_state.py):
Spark's state data source over a real applyInPandasWithState checkpoint with the job's state
schema (spark/stateful.py STATE_SCHEMA), holding the states the shipped step saved (content
references in the checkpoint's content folder, as the job stores them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from routing_lib.content_files import CONTENT_FOLDER, ContentFolder
from routing_lib.core.content import CONTENT, is_ref
from routing_lib.migrate_state import checkpoint_states, has_state
from routing_lib.spark.stateful import STATE_SCHEMA
from tests.test_migrate import PER_TOPIC, Model, _batches, _run

pytestmark = pytest.mark.spark

INPUT_SCHEMA = "group_key STRING, clock STRING, topics STRING, history STRING, topic_history STRING"


def _keep(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """Save the group's last input row as its state, as the job's step saves a SavedGroup."""
    for frame in frames:
        last = frame.iloc[-1]
        state.update((last["clock"], last["topics"], last["history"], last["topic_history"]))
    yield pd.DataFrame({"group_key": [key[0]]})


def test_the_checkpoints_group_states_read_as_the_step_saved_them(spark, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    model = Model(True)
    model.backend = CONTENT.attach(ContentFolder(str(checkpoint / CONTENT_FOLDER)))
    model.config = PER_TOPIC
    events, sizes = _batches(21)
    _run(model, events, sizes, 0, len(sizes))
    want = model.group_states()
    assert any(not s.overlay.is_trivial() for s in want.values())
    assert any(is_ref(s.topics) for s in model.states.values())  # in the content folder
    assert any((checkpoint / CONTENT_FOLDER).rglob("*"))
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "states.json").write_text(
        "\n".join(json.dumps({"group_key": g, **asdict(s)}) for g, s in model.states.items())
    )
    assert not has_state(str(checkpoint))

    query = (
        spark.readStream.schema(INPUT_SCHEMA)
        .json(str(inputs))
        .groupBy("group_key")
        .applyInPandasWithState(
            _keep, "group_key STRING", STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout
        )
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    assert has_state(str(checkpoint))
    assert checkpoint_states(spark, str(checkpoint)) == want
