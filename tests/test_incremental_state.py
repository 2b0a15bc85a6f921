"""A heartbeat or an unchanged registration costs O(1) per group, not O(topics).

Driven through the real step function that applyInPandasWithState runs, with pyspark's own
GroupState carrying the state between calls, as the Python worker does.
"""

from __future__ import annotations

import json

from routing_lib.core.columnar import bundle_rows
from routing_lib.core.topic_table import TopicTable
from routing_lib.core.wire import pack_event
from schemas import parse_event
from tests.support.step_support import group_state, run_step

T0 = 1_764_000_000_000
TOPICS = 10_000


def register(t: int, counter: int = 1) -> dict:
    return {
        "eventType": "REGISTER",
        "eventTime": t,
        "clusterName": "C",
        "brokerAddr": "10.0.0.1:10911",
        "brokerName": "wide",
        "brokerId": 0,
        "haServerAddr": "10.0.0.1:10912",
        "dataVersion": {"stateVersion": 0, "timestamp": T0, "counter": counter},
        "topicConfigTable": {
            f"T{i:05d}": {
                "topicName": f"T{i:05d}",
                "readQueueNums": 8,
                "writeQueueNums": 8,
                "perm": 6,
            }
            for i in range(TOPICS)
        },
    }


def heartbeat(t: int) -> dict:
    return {
        "eventType": "HEARTBEAT",
        "eventTime": t,
        "clusterName": "C",
        "brokerAddr": "10.0.0.1:10911",
        "brokerName": "wide",
        "brokerId": 0,
    }


def rows(*records: dict) -> list[tuple]:
    return [
        (r["eventTime"], "k-0", n, pack_event(parse_event(json.dumps(r))))
        for n, r in enumerate(records)
    ]


def registered_state():
    """The group's state after its first 10 000-topic registration was applied (its base rows:
    the group layout, issue 36)."""
    state = group_state()
    out = run_step(rows(register(T0)), state, watermark=T0 + 1)
    topic_rows = out[(out.kind == "change") & (out.table == "topic_base")]
    written = [row for r in topic_rows.row_json for row in bundle_rows("topic_base", r)]
    assert len(written) == TOPICS  # written once
    return state.get


def step_again(saved, records: list[dict], watermark: int):
    state = group_state(tuple(saved))
    decodes = TopicTable.decodes
    out = run_step(rows(*records), state, watermark=watermark)
    return state.get, out, TopicTable.decodes - decodes


def test_heartbeats_only_batch_does_not_decode_the_topic_table():
    saved = registered_state()
    after, out, decodes = step_again(
        saved, [heartbeat(T0 + 5_000), heartbeat(T0 + 10_000)], watermark=T0 + 10_000
    )
    assert decodes == 0
    assert after[1] is saved[1]  # the topics blob, handed back as it came
    assert after[3] is saved[3]  # the topic history opens too
    changed = set(out[out.kind == "change"].table)
    assert changed == {"broker_live_table"}  # lastUpdateTimestamp moved, nothing else


def test_unchanged_registration_leaves_the_topic_blob_untouched():
    saved = registered_state()
    after, out, decodes = step_again(saved, [register(T0 + 30_000)], watermark=T0 + 30_000)
    assert decodes == 0
    assert after[1] is saved[1] and after[3] is saved[3]
    assert set(out[out.kind == "change"].table) == {"broker_live_table"}


def test_changed_data_version_rewrites_the_topics():
    saved = registered_state()
    changed = register(T0 + 30_000, counter=2)
    changed["topicConfigTable"]["T00007"]["perm"] = 4
    after, out, _ = step_again(saved, [changed], watermark=T0 + 30_000)
    assert after[1] != saved[1]
    topic_rows = out[(out.kind == "change") & (out.table == "topic_base")]
    rows = [row for r in topic_rows.row_json for row in bundle_rows("topic_base", r)]
    assert [row["topic"] for row in rows] == ["T00007"]
