"""Topic tables as content references (routing_lib/core/content.py): exact, and O(1) in state.

The random histories are rewritten into what real fleets send besides plain registrations:
split registrations (chunks, each with a new dataVersion, interleaved across brokers), re-sent
unchanged tables, and a table changed under an unchanged dataVersion (RocketMQ ignores the
change: so must we). The stream model runs the shipped step with every topic table and large
state value as a content reference; it must equal the plain sequential replay.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from routing_lib.content_files import ContentSettings
from routing_lib.core.content import CONTENT, ContentStore, content_ref, is_ref
from routing_lib.core.dump import project
from routing_lib.core.replay import replay_dump
from routing_lib.core.topic_table import AppliedRegistration, QueueData, TopicTable
from routing_lib.core.wire import externalize, pack_event
from schemas import parse_event
from tests.support.helpers import DELAY_MS, random_history, registration_modes, seeds
from tests.support.step_support import group_state, run_step
from tests.support.stream_model import run_model_in_batches

Record = dict[str, Any]


def _history(seed: int) -> list:
    rng = random.Random(seed)
    records = registration_modes(random_history(seed, rng), rng)
    return [parse_event(json.dumps(r)) for r in records]


@pytest.mark.parametrize("seed", seeds(24))
def test_registration_modes_as_content_refs_in_random_batches_equal_replay(seed):
    events = _history(seed)
    final = max(e.eventTime for e in events) - DELAY_MS
    expected = project(replay_dump(events, final))
    rng = random.Random(seed * 7 + 1)
    model = run_model_in_batches(
        events, rng, DELAY_MS, content_refs=True, max_batch=rng.choice([2, 10, 60])
    )
    assert model.late == 0
    assert model.dump() == expected


def test_the_rewrites_are_not_no_ops():
    """Split and changed-under-dataVersion registrations change the replayed tables."""
    changed = 0
    for seed in range(8):
        rng = random.Random(seed)
        plain = random_history(seed, rng)
        rewritten = registration_modes(plain, rng)
        final = max(r["eventTime"] for r in plain) - DELAY_MS
        as_events = [[parse_event(json.dumps(r)) for r in h] for h in (plain, rewritten)]
        changed += replay_dump(as_events[0], final) != replay_dump(as_events[1], final)
    assert changed >= 4


# ---- a large fleet member: 10 000 topics ----------------------------------------------------


def _register(topics: int, event_time: int, counter: int = 1, chunk: range | None = None) -> Record:
    names = [f"topic-{i:05d}" for i in range(topics)]
    if chunk is not None:
        names = names[chunk.start : chunk.stop]
    return {
        "eventType": "REGISTER",
        "eventTime": event_time,
        "clusterName": "C1",
        "brokerAddr": "10.0.0.1:10911",
        "brokerName": "broker-big",
        "brokerId": 0,
        "haServerAddr": "10.0.0.1:10912",
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": counter},
        "topicConfigTable": {
            n: {
                "topicName": n,
                "readQueueNums": 8,
                "writeQueueNums": 8,
                "perm": 6,
                "topicSysFlag": 0,
            }
            for n in names
        },
    }


T0 = 1_764_000_000_000


def test_unchanged_10000_topic_registration_parks_no_topic_bytes_in_state(tmp_path):
    """Through the Spark adapter's step with pyspark's GroupState: after the first
    registration, re-sent ones (as stage one passes them: the table as a reference) leave a
    state row of a few hundred bytes, parked or applied."""
    content = ContentSettings(str(tmp_path / "content"), min_chars=4096)
    backend = content.backend()

    def payload(record: Record) -> str:
        return externalize(pack_event(parse_event(json.dumps(record))), backend, 4096)

    first = payload(_register(10_000, T0))
    assert len(first) < 1000  # stage one's form: head + reference
    state = group_state()
    run_step([(T0, "k-0", 0, first)], state, T0 + 1, group="broker-big", content=content)
    assert state.exists
    state = group_state(tuple(state.get), T0 + 1)
    sizes = []
    for n in range(1, 4):  # parked (ahead of the watermark), then applied
        at = T0 + n * 30_000
        again = payload(_register(10_000, at))
        run_step([(at, "k-0", n, again)], state, at - 1, group="broker-big", content=content)
        state = group_state(tuple(state.get), at - 1)
        sizes.append(sum(len(v or "") for v in state.get))
    assert max(sizes) < 2000, sizes
    clock, topics, _history, topic_history = state.get
    # the group layout keeps no topic_route_history intervals in state (issue 36)
    assert is_ref(topics) and topic_history == ""
    assert "topic-00042" not in clock
    assert len(CONTENT.get(topics).split("\x1e")[0].split("\x1f")) == 10_000


def test_10000_topics_in_800_topic_chunks_equal_one_whole_registration():
    whole = [parse_event(json.dumps(_register(10_000, T0)))]
    chunks = [
        parse_event(json.dumps(_register(10_000, T0 + i, 100 + i, range(s, s + 800))))
        for i, s in enumerate(range(0, 10_000, 800))
    ]
    final = T0 + 60_000
    expected = replay_dump(whole, final)
    assert len(expected["topicQueueTable"]) == 10_000
    assert replay_dump(chunks, final)["topicQueueTable"] == expected["topicQueueTable"]
    resent = chunks + [
        parse_event(json.dumps(_register(10_000, T0 + 30_000 + i, 200 + i, range(s, s + 800))))
        for i, s in enumerate(range(0, 10_000, 800))
    ]
    model = run_model_in_batches(resent, random.Random(3), DELAY_MS, content_refs=True)
    assert model.dump()["topicQueueTable"] == project(expected)["topicQueueTable"]


# ---- the store itself ------------------------------------------------------------------------


class _Folder:
    def __init__(self, name: str):
        self.name, self.files = name, {}

    def read(self, ref: str) -> str | None:
        return self.files.get(ref)

    def write(self, ref: str, text: str) -> None:
        self.files[ref] = text


def test_store_evicts_only_durable_content_and_reads_it_back():
    store = ContentStore(max_bytes=100)
    pinned = store.put("p" * 80)  # no backend: memory is its only copy
    folder = store.attach(_Folder("f"))
    durable = store.put("d" * 80, folder)
    store.put("e" * 80, folder)
    assert store.get(pinned) == "p" * 80  # never evicted
    assert store.cached_bytes <= 100 + 80 * 2
    assert store.get(durable) == "d" * 80  # read back from the folder if evicted
    assert content_ref("d" * 80) == durable


def test_content_folder_writes_once_and_a_fresh_process_reads_it(tmp_path):
    settings = ContentSettings(str(tmp_path / "c"), min_chars=1)
    ref = CONTENT.put("keys\x1e[[1,1,6,0,null]]", settings.backend())
    files = list((tmp_path / "c").rglob("*"))
    assert any(f.name == ref[1:] for f in files)
    fresh = ContentStore()
    fresh.attach(type(settings.backend())(settings.location))
    assert fresh.get(ref) == "keys\x1e[[1,1,6,0,null]]"


def test_a_table_carries_the_registration_that_built_it_from_its_construction():
    """TopicTable is immutable: which registration built it is given when it is built
    (`updated`), not set on it afterwards; a table that changed nothing stays itself."""
    table = TopicTable({"A": QueueData(8, 8, 6, 0)})
    applied = AppliedRegistration("ref-1", False)
    built = table.updated({"B": QueueData(4, 4, 6, 0)}, applied)
    assert built.applied_registration == applied and table.applied_registration is None
    assert table.updated({"A": QueueData(8, 8, 6, 0)}, applied) is table  # nothing changed
    with pytest.raises(AttributeError):
        built.applied_registration = None  # type: ignore[misc]
