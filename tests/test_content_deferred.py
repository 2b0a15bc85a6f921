"""ContentStore.deferred_writes: references made within the block are written when it ends,
chunks before manifests, each once; an exception writes nothing (routing_lib/core/content.py)."""

from __future__ import annotations

import pytest

from routing_lib.core.chunks import RS, US
from routing_lib.core.content import ContentStore, is_chunked_ref, manifest_digests

NAMES = [f"topic-{i:05d}" for i in range(3000)]


def _table_text(perm: int) -> str:
    rows = ",".join(f"[8,8,{perm},0,null]" for _ in NAMES)
    return f"{US.join(NAMES)}{RS}[{rows}]"


class _Recorder:
    """A backend that records the order of its writes."""

    def __init__(self) -> None:
        self.name = "recorder"
        self.files: dict[str, str] = {}
        self.order: list[str] = []

    def read(self, ref: str) -> str | None:
        return self.files.get(ref)

    def write(self, ref: str, text: str) -> None:
        self.order.append(ref)
        self.files[ref] = text


def test_writes_wait_for_the_end_of_the_block_chunks_first_each_once():
    store, backend = ContentStore(), _Recorder()
    with store.deferred_writes():
        first = store.put(_table_text(6), backend)
        again = store.put(_table_text(6), backend)  # a slave's same table: queued once
        second = store.put(_table_text(7), backend)  # shares no row chunk with the first
        small = store.put("x" * 10, backend)
        assert backend.order == []  # nothing durable inside the block
    assert first == again and is_chunked_ref(first) and is_chunked_ref(second)
    manifests = {first, second}
    chunks = set()
    for ref in manifests:
        listed = manifest_digests(backend.files[ref])
        assert listed
        chunks |= {ref[0] + digest for digest in listed}
    assert len(backend.order) == len(set(backend.order))  # every file written once
    last_chunk = max(i for i, ref in enumerate(backend.order) if ref[1:] in {c[1:] for c in chunks})
    assert all(backend.order.index(ref) > last_chunk for ref in manifests)
    assert small in backend.files
    fresh = ContentStore()
    fresh.attach(backend)
    assert fresh.get(first) == _table_text(6) and fresh.get(second) == _table_text(7)
    # durable now: ensuring again writes nothing
    writes = len(backend.order)
    store.put(_table_text(6), backend)
    assert len(backend.order) == writes


def test_an_exception_in_the_block_writes_nothing_and_a_later_put_writes_it():
    store, backend = ContentStore(), _Recorder()
    with pytest.raises(RuntimeError), store.deferred_writes():
        ref = store.put(_table_text(5), backend)
        raise RuntimeError("the task fails")
    assert backend.order == []
    assert store.put(_table_text(5), backend) == ref
    assert ref in backend.files


def test_nested_blocks_write_at_the_outer_end():
    store, backend = ContentStore(), _Recorder()
    with store.deferred_writes():
        with store.deferred_writes():
            ref = store.put("y" * 50, backend)
        assert backend.order == []
    assert backend.order == [ref]


def test_stage_one_yields_a_frame_once_its_new_tables_are_in_the_folder(tmp_path):
    """The Kafka classifier writes a frame's tables at the end of the frame: every reference
    in the frame it yields names files already in the content folder."""
    import pandas as pd

    from routelake_dev.simulator import EventEncoder, iter_history
    from routing_lib.content_files import ContentFolder, ContentSettings
    from routing_lib.core.wire import topics_ref
    from routing_lib.spark.sources import make_kafka_classifier

    start_ms = 1_764_000_000_000
    history = iter_history(3, 4, 2000, 40_000, 30_000, start_ms, heartbeats_per_period=5)
    encode = EventEncoder()
    records = [encode(event) for event in history if event["eventType"] == "REGISTER"][:4]
    frame = pd.DataFrame(
        {
            "value": records,
            "topic": ["t"] * len(records),
            "partition": [0] * len(records),
            "offset": list(range(len(records))),
        }
    )
    store = ContentSettings(str(tmp_path / "content"), 4096)
    (out,) = list(make_kafka_classifier(10**15, store=store)(iter([frame])))
    refs = [topics_ref(payload) for payload in out["payload"]]
    assert len(refs) == 4 and all(refs)
    reader = ContentStore()
    reader.attach(ContentFolder(store.location))
    for ref in refs:
        assert ref is not None and reader.get(ref)  # manifest and chunks read from the folder
