"""Large values in content-addressed chunks (routing_lib/core/chunks.py, core/content.py): a
fault of a 10 000-topic group writes content only for what it changed.

- a return of the group with a topic set it had before writes no file at all;
- a one-topic change writes a few small files (the chunks around the topic, the manifests);
- the chunked and opens forms read back byte for byte, from memory or from the folder alone;
- random histories with every value chunked (and cuts forced often) equal the replay;
- the collector keeps the chunks a marked manifest lists.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from routing_lib.content_files import ContentFolder
from routing_lib.content_gc import MANIFEST_IN_TEXT, chunk_digests, sweep
from routing_lib.core import chunks
from routing_lib.core.chunks import RS, US, chunk_cuts, join_opens, split_opens
from routing_lib.core.content import (
    CONTENT,
    ContentStore,
    MissingContentError,
    content_ref,
    is_chunked_ref,
    is_opens_value,
    manifest_digests,
)
from routing_lib.core.dump import project
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.core.replay import replay_dump
from routing_lib.core.step import (
    BatchContext,
    HeldContent,
    InputRow,
    SavedGroup,
    StepConfig,
    step_group,
)
from routing_lib.core.wire import externalize, pack_event
from schemas import parse_event
from tests.support.helpers import DELAY_MS, random_history, registration_modes, seeds
from tests.support.stream_model import StreamModel

pytestmark = pytest.mark.unit

T0 = 1_764_000_000_000
GROUP = "broker-big"
TIMEOUT_MS = 120_000
NAMES = [f"topic-{i:05d}" for i in range(10_000)]


def _table_text(names: list[str], perm: dict[str, int] | None = None) -> str:
    perm = perm or {}
    rows = [[8, 8, perm.get(n, 6), 0, None] for n in names]
    return US.join(names) + RS + json.dumps(rows, separators=(",", ":"))


# ---- where the cuts go ---------------------------------------------------------------------


def _pieces(text: str) -> list[str]:
    edges = [0, *chunk_cuts(text), len(text)]
    return [text[a:b] for a, b in zip(edges, edges[1:], strict=False)]


def test_cuts_split_names_and_rows_at_the_same_topics_and_join_back():
    text = _table_text(NAMES)
    pieces = _pieces(text)
    assert "".join(pieces) == text
    names_pieces = pieces[: len(pieces) // 2]
    rows_pieces = pieces[len(pieces) // 2 :]
    assert rows_pieces[0].startswith(RS + "[[")
    assert 20 <= len(names_pieces) <= 60  # a cut before one name in 256, on average
    for names_piece, rows_piece in zip(names_pieces, rows_pieces, strict=True):
        in_names = names_piece.strip(US).count(US) + 1
        assert rows_piece.count("[8,8,") == in_names


def test_a_one_topic_change_changes_at_most_two_chunks_of_each_section():
    before = set(_pieces(_table_text(NAMES)))
    for names, perm in [
        ([*NAMES, "topic-added"], None),  # appended
        ([n for n in NAMES if n != "topic-05000"], None),  # removed
        (NAMES, {"topic-05000": 4}),  # a perm change in the middle
        ([*NAMES[:4000], "topic-04000a", *NAMES[4000:]], None),  # inserted
    ]:
        new = [p for p in _pieces(_table_text(names, perm)) if p not in before]
        assert 1 <= len(new) <= 4, len(new)
        assert sum(map(len, new)) < 20_000


def test_text_of_another_layout_gets_no_cuts_and_odd_rows_stay_whole():
    assert chunk_cuts('{"a":1}') == []
    assert chunk_cuts("") == []
    text = US.join(NAMES) + RS + "[[1,2]]"  # rows that are not one per name
    cuts = chunk_cuts(text)
    assert cuts[-1] == text.index(RS)
    assert "".join(_pieces(text)) == text


def test_open_intervals_split_into_names_and_runs_and_join_back():
    pairs = [[n, T0] for n in NAMES[:500]] + [["topic-x", T0 + 5], [NAMES[0] + "z", T0]]
    text = json.dumps(pairs, separators=(",", ":"))
    names_text, runs = split_opens(text)  # type: ignore[misc]
    assert runs == [[T0, 500], [T0 + 5, 1], [T0, 1]]
    assert names_text.split(US)[-1] == NAMES[0] + "z"
    assert join_opens(names_text, runs) == text


@pytest.mark.parametrize(
    "text",
    ["", "[]", '[["a",1,2]]', '[["a","1"]]', '[["a",true]]', '[["a", 1]]', '{"a":1}', "[[1,2]]"],
)
def test_other_texts_are_not_taken_for_open_intervals(text):
    assert split_opens(text) is None


# ---- the store -----------------------------------------------------------------------------


def _files(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_a_chunked_text_is_read_back_from_the_folder_alone(tmp_path):
    folder = ContentFolder(str(tmp_path / "c"))
    text = _table_text(NAMES)
    writer = ContentStore()
    ref = writer.put(text, folder)
    assert is_chunked_ref(ref)
    manifest = (tmp_path / "c" / ref[1:3] / ref[1:]).read_text()
    listed = manifest_digests(manifest)
    assert listed and len(listed) > 20
    assert set(listed) | {ref[1:]} == set(_files(tmp_path / "c"))
    reader = ContentStore()
    reader.attach(ContentFolder(str(tmp_path / "c")))
    assert reader.get(ref) == text
    assert reader.put(text) == ref  # the same text, the same reference, in any process
    # a lost chunk stops the read with its name
    lost = tmp_path / "c" / listed[3][:2] / listed[3]
    lost.unlink()
    fresh = ContentStore()
    fresh.attach(ContentFolder(str(tmp_path / "c")))
    with pytest.raises(MissingContentError, match=listed[3]):
        fresh.get(ref)


def test_an_unchanged_chunk_is_not_written_again(tmp_path):
    folder = ContentFolder(str(tmp_path / "c"))
    store = ContentStore()
    store.put(_table_text(NAMES), folder)
    writes = store.backend_writes
    store.put(_table_text(NAMES, {"topic-05000": 4}), folder)
    assert store.backend_writes - writes <= 4  # changed chunk(s) and the manifest


def test_small_texts_keep_plain_references():
    store = ContentStore()
    ref = store.put(_table_text(NAMES[:100]))
    assert ref == content_ref(_table_text(NAMES[:100]))


# ---- a 10 000-topic group's faults through the shipped step -------------------------------


class _CountingFolder(ContentFolder):
    """The folder backend, counting the writes that reach it (`writes`: a write of a file
    already there counts too, locally a touch, on object storage a PUT of the whole file
    again) and those that create a file (`created`)."""

    def __init__(self, location: str):
        super().__init__(location)
        self.writes = self.created = 0
        self._lock = threading.Lock()  # the store writes a new text's chunks side by side

    def write(self, ref: str, text: str) -> None:
        new = not Path(self._path(ref)).exists()
        with self._lock:
            self.writes += 1
            self.created += new
        super().write(ref, text)

    def counts(self) -> tuple[int, int]:
        return self.writes, self.created


class _Group:
    """One 10 000-topic group stepped event by event with a content folder, as stage one and
    the step store content; `fresh` forgets the process's texts before every step."""

    def __init__(self, folder: Path, fresh: bool):
        self.folder = folder
        self.backend = _CountingFolder(str(folder))
        assert CONTENT.attach(self.backend) is self.backend
        self.fresh = fresh
        self.saved: SavedGroup | None = None
        self.at, self.counter, self.position, self.published = T0, 0, 0, T0 - 1

    def _step(self, record: dict[str, Any] | None, watermark: int) -> None:
        if self.fresh:
            CONTENT.clear()
        rows = []
        if record is not None:
            packed = externalize(pack_event(parse_event(json.dumps(record))), self.backend, 4096)
            rows.append(InputRow(record["eventTime"], ("t", self.position), packed))
            self.position += 1
        result = step_group(
            GROUP,
            self.saved,
            rows,
            BatchContext(watermark, self.published),
            # the per-topic layout: it saves topic_route_history's open intervals, whose
            # content these tests count (the group layout saves none: issue 36)
            StepConfig(DEFAULT_FLAGS, group_facts=False),
            content=HeldContent(self.backend, 4096),
        )
        self.saved, self.published = result.state, watermark

    def register(self, names: list[str], perm: dict[str, int] | None = None) -> None:
        self.at, self.counter = self.at + 30_000, self.counter + 1
        table = {
            n: {"topicName": n, "readQueueNums": 8, "writeQueueNums": 8, "perm": 6} for n in names
        }
        for name, value in (perm or {}).items():
            table[name]["perm"] = value
        record = {
            "eventType": "REGISTER",
            "eventTime": self.at,
            "clusterName": "C1",
            "brokerAddr": "10.0.0.1:10911",
            "brokerName": GROUP,
            "brokerId": 0,
            "heartbeatTimeoutMillis": TIMEOUT_MS,
            "dataVersion": {"stateVersion": 0, "timestamp": self.at, "counter": self.counter},
            "topicConfigTable": table,
        }
        self._step(record, self.at + 1)

    def expire(self) -> None:
        self.at += TIMEOUT_MS + 1_000
        self._step(None, self.at)

    def open_topics(self) -> int:
        if self.saved is None:  # an idle group leaves no state
            return 0
        value = self.saved.topic_history
        return len(json.loads(CONTENT.resolve(value))) if value else 0


@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh-process"])
def test_a_return_with_a_known_topic_set_writes_no_content(tmp_path, fresh):
    """Counted at the backend: a warm process writes nothing at all; a fresh one creates no
    file but refreshes the ones its references name (it has not touched them within the
    store's freshness window, which the collector's grace period relies on)."""
    group = _Group(tmp_path / "content", fresh)
    group.register(NAMES)
    group.expire()
    assert group.open_topics() == 0
    before = group.backend.counts()
    group.register(NAMES)  # back after the expiry: a new dataVersion, the same topics
    assert group.open_topics() == 10_000
    assert group.saved is not None and is_opens_value(group.saved.topic_history)
    _assert_wrote_nothing(group.backend, before, fresh)
    # the same after a topic change and its undoing
    group.register([*NAMES, "topic-added"])
    group.expire()
    before = group.backend.counts()
    group.register([*NAMES, "topic-added"])
    assert group.open_topics() == 10_001
    _assert_wrote_nothing(group.backend, before, fresh)


def _assert_wrote_nothing(backend: _CountingFolder, before: tuple[int, int], fresh: bool) -> None:
    writes, created = (now - then for now, then in zip(backend.counts(), before, strict=True))
    assert created == 0, "no new file"
    if not fresh:
        assert writes == 0, "not a touch either"


@pytest.mark.parametrize(
    "change",
    [
        lambda: ([*NAMES, "topic-added"], None),
        lambda: ([n for n in NAMES if n != "topic-04321"], None),
        lambda: (NAMES, {"topic-04321": 4}),
    ],
    ids=["added", "removed", "perm"],
)
def test_a_one_topic_change_writes_a_few_small_files(tmp_path, change):
    group = _Group(tmp_path / "content", fresh=False)
    group.register(NAMES)
    before = _files(group.folder)
    whole = len(_table_text(NAMES))
    names, perm = change()
    group.register(names, perm)
    new = {name: size for name, size in _files(group.folder).items() if name not in before}
    # the registration's table, the group's topics and its open intervals' names: each a
    # chunk or two and a manifest of ~150 digests (~5 KB)
    assert 1 <= len(new) <= 15, new
    assert sum(new.values()) < whole / 10, (sum(new.values()), whole)


# ---- exact: random histories with every value chunked ----------------------------------


class _MemoryFolder:
    """A content backend in a dict (files cost an fsync each: hundreds per history here)."""

    name = "memory"

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def read(self, ref: str) -> str | None:
        text = self.files.get(ref)
        assert text is None or content_ref(text)[1:] == ref[1:]
        return text

    def write(self, ref: str, text: str) -> None:
        self.files[ref] = text


@pytest.mark.parametrize("seed", seeds(10))
def test_random_histories_with_chunked_values_read_back_from_the_store_equal_replay(
    seed, monkeypatch
):
    monkeypatch.setattr(CONTENT, "chunk_min_chars", 1)
    monkeypatch.setattr(chunks, "_CUT_MASK", 1)  # a cut before every other name
    rng = random.Random(seed)
    records = registration_modes(random_history(seed, rng), rng)
    events = [parse_event(json.dumps(r)) for r in records]
    final = max(e.eventTime for e in events) - DELAY_MS
    model = StreamModel(DELAY_MS, True, backend=_MemoryFolder())
    i, chunked = 0, 0
    while i < len(events):
        size = rng.randint(1, 30)
        CONTENT.clear()  # the next batch reads everything back from the backend
        model.batch([(e, ("file", i + n)) for n, e in enumerate(events[i : i + size])])
        chunked += sum(
            is_chunked_ref(s.topics) or is_opens_value(s.topic_history)
            for s in model.states.values()
        )
        i += size
    model.finish(final)
    assert chunked > 0
    assert model.dump() == project(replay_dump(events, final))


# ---- the collector ---------------------------------------------------------------------


def test_the_collector_keeps_the_chunks_of_a_marked_manifest(tmp_path):
    import re

    location = tmp_path / "content"
    folder = ContentFolder(str(location))
    store = ContentStore()
    kept_ref = store.put(_table_text(NAMES), folder)
    gone_ref = store.put(_table_text(NAMES[:3000]), folder)
    hour_ago = time.time() - 5 * 3600
    for path in location.rglob("*"):
        os.utime(path, (hour_ago, hour_ago))
    # as the mark finds it: in a state value's JSON, escaped
    value = json.dumps({"topics": kept_ref, "clock": json.dumps({"p": "x\x1e" + kept_ref})})
    manifests = set(re.findall(MANIFEST_IN_TEXT, value))
    assert manifests == {kept_ref[1:]}
    gone_manifest = (location / gone_ref[1:3] / gone_ref[1:]).read_text()
    live = manifests | chunk_digests(str(location), manifests)
    sweep(str(location), live, time.time(), 3600)
    reader = ContentStore()
    reader.attach(ContentFolder(str(location)))
    assert reader.get(kept_ref) == _table_text(NAMES)
    gone_only = set(manifest_digests(gone_manifest) or []) - live
    assert gone_only, "the smaller table has chunks of its own"
    on_disk = set(_files(location))
    assert not gone_only & on_disk and gone_ref[1:] not in on_disk
