"""The content store under storage faults: a storage error is retried and then fails the task
(never a dead letter), a missing or corrupt file stops the step with a message that names the
reference, the file, the checkpoint and the fix, and a local write is durable (the folder is
fsynced after the rename). Faults are injected at the operating system's boundary (os.replace,
Path.read_bytes) for files under the test's content folder only."""

from __future__ import annotations

import json
import os
import random
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from routing_lib.content_files import ContentFolder, ContentSettings, content_path
from routing_lib.core.content import (
    CONTENT,
    ContentStorageError,
    CorruptContentError,
    MissingContentError,
    content_ref,
)
from routing_lib.core.dump import project
from routing_lib.core.replay import replay_dump
from routing_lib.ingest import DEAD_LETTER_KEY, classify
from routing_lib.spark.failures import JobPlaces, explain
from schemas import parse_event
from tests.support.helpers import DELAY_MS, random_history, registration_modes
from tests.support.step_support import group_state, run_step
from tests.support.stream_model import StreamModel

pytestmark = pytest.mark.unit

T0 = 1_764_000_000_000


def _register(event_time: int, topics: int = 12, counter: int = 1) -> dict[str, Any]:
    # topic names of this test only: the process's store reads every folder attached in it,
    # and earlier tests' folders hold the same content under the same reference
    names = [f"topic-{_TAG[0]}-{i:03d}" for i in range(topics)]
    return {
        "eventType": "REGISTER",
        "eventTime": event_time,
        "clusterName": "C1",
        "brokerAddr": "10.0.0.1:10911",
        "brokerName": "broker-f",
        "brokerId": 0,
        "haServerAddr": "10.0.0.1:10912",
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": counter},
        "topicConfigTable": {
            n: {"topicName": n, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6} for n in names
        },
    }


_TAG = ["-"]


@pytest.fixture(autouse=True)
def _fresh_content_cache():
    _TAG[0] = uuid.uuid4().hex[:8]
    CONTENT.clear()
    yield
    CONTENT.clear()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"


def _settings(checkpoint: Path, attempts: int = 3) -> ContentSettings:
    return ContentSettings(str(checkpoint / "content"), 1, attempts, 0.0)


class Faults:
    """Fails calls on paths under `root`: the first `first` ones, then every `every`-th."""

    def __init__(self, root: Path, first: int = 0, every: int = 0):
        self.root, self.first, self.every = str(root), first, every
        self.calls = self.failed = 0

    def hit(self, path: object) -> None:
        if not str(path).startswith(self.root):
            return
        self.calls += 1
        if self.calls <= self.first or (self.every and self.calls % self.every == 0):
            self.failed += 1
            raise OSError(5, "injected I/O error", str(path))


def _fail_renames(monkeypatch: pytest.MonkeyPatch, faults: Faults) -> None:
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        faults.hit(dst)
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def _fail_reads(monkeypatch: pytest.MonkeyPatch, faults: Faults) -> None:
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        faults.hit(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)


def _files(checkpoint: Path) -> list[Path]:
    return [p for p in (checkpoint / "content").rglob("*") if p.is_file()]


# ---- stage one ---------------------------------------------------------------------------


def test_a_storage_error_in_stage_one_is_retried_and_the_registration_kept(checkpoint, monkeypatch):
    faults = Faults(checkpoint, first=2)
    _fail_renames(monkeypatch, faults)
    raw = json.dumps(_register(T0)).encode()
    classified = classify(raw, "k-0", 1, None, 0, store=_settings(checkpoint))
    assert classified.group_key == "broker-f", classified.reason
    assert faults.failed == 2
    (stored,) = _files(checkpoint)
    assert classified.payload is not None and classified.payload.endswith(stored.name)


def test_a_storage_error_in_stage_one_past_the_retries_fails_the_task(checkpoint, monkeypatch):
    _fail_renames(monkeypatch, Faults(checkpoint, first=1000))
    raw = json.dumps(_register(T0, counter=2)).encode()
    with pytest.raises(ContentStorageError, match="failed 3 times"):
        classify(raw, "k-0", 2, None, 0, store=_settings(checkpoint))


def test_a_record_that_fails_validation_is_still_a_dead_letter(checkpoint):
    classified = classify(b'{"eventType": "REGISTER"}', "k-0", 3, None, 0, _settings(checkpoint))
    assert classified.group_key == DEAD_LETTER_KEY


# ---- the step ----------------------------------------------------------------------------


def _parked(checkpoint: Path) -> tuple[Any, ContentSettings, str]:
    """A group whose pending registration's topic table is a reference (parked ahead of the
    watermark), and the state it left."""
    settings = _settings(checkpoint)
    raw = json.dumps(_register(T0 + 5_000)).encode()
    payload = classify(raw, "k-0", 1, None, 0, store=settings).payload
    assert payload is not None
    state = group_state()
    run_step([(T0 + 5_000, "k-0", 1, payload)], state, T0, group="broker-f", content=settings)
    assert state.exists
    ref = payload.rsplit("\x1e", 1)[1]
    return tuple(state.get), settings, ref


def test_a_fresh_worker_reads_a_pending_reference_from_the_folder(checkpoint, monkeypatch):
    """A Python worker that has run nothing yet: no content folder attached, nothing cached.
    The step must attach its folder before it loads the group (a parked registration's table,
    the group's stored values), not only when it saves."""
    saved, settings, ref = _parked(checkpoint)
    CONTENT.clear()
    for attachments in ("_backends", "_written", "_ensured_at"):
        monkeypatch.setattr(CONTENT, attachments, {})
    state = group_state(saved, T0)
    run_step([], state, T0 + 10_000, group="broker-f", content=settings)
    assert state.get[1].startswith("\x1d"), "applied: the group's topics are stored"
    assert CONTENT.ref_of(CONTENT.get(ref)) == ref


def test_a_missing_pending_event_reference_stops_the_step_with_the_fix(checkpoint):
    saved, settings, ref = _parked(checkpoint)
    (checkpoint / "content" / ref[1:3] / ref[1:]).unlink()
    CONTENT.clear()  # a fresh Python worker: nothing cached
    with pytest.raises(MissingContentError) as failure:
        run_step([], group_state(saved, T0), T0 + 10_000, group="broker-f", content=settings)
    message = str(failure.value)
    assert ref[1:] in message
    assert str(checkpoint / "content" / ref[1:3] / ref[1:]) in message
    assert f"checkpoint {checkpoint}" in message
    assert "Restore the content folder" in message and "fresh checkpoint" in message


def test_a_missing_state_reference_stops_the_step_with_the_fix(checkpoint):
    saved, settings, _ = _parked(checkpoint)
    state = group_state(saved, T0)
    run_step([], state, T0 + 10_000, group="broker-f", content=settings)  # applied
    topics = state.get[1]
    assert topics.startswith("\x1d")
    (checkpoint / "content" / topics[1:3] / topics[1:]).unlink()
    CONTENT.clear()
    with pytest.raises(MissingContentError, match=f"{topics[1:]}: file .* of checkpoint"):
        run_step([], group_state(tuple(state.get), T0 + 10_000), T0 + 20_000, "broker-f", settings)


# Each way a content file gets damaged, from the bytes it holds and another file's bytes.
CORRUPTIONS = {
    "a non-UTF-8 byte": lambda data, other: data[:20] + b"\xff" + data[21:],
    "truncated": lambda data, other: data[: len(data) // 2],
    "emptied": lambda data, other: b"",
    "another file's bytes": lambda data, other: other,
    "an ASCII substitution": lambda data, other: data.replace(b"-001", b"-00X"),
}


def _corrupt(settings: ContentSettings, ref: str, how: str) -> Path:
    """Damage the file of `ref` in the way `how` names; its path."""
    folder = ContentFolder(settings.location)
    other_text = f"another table of {_TAG[0]}"
    folder.write(content_ref(other_text), other_text)
    other = Path(settings.location) / content_ref(other_text)[1:3] / content_ref(other_text)[1:]
    path = Path(settings.location) / ref[1:3] / ref[1:]
    path.write_bytes(CORRUPTIONS[how](path.read_bytes(), other.read_bytes()))
    CONTENT.clear()  # a fresh Python worker: nothing cached
    return path


def _assert_names_the_fix(message: str, ref: str, path: Path, checkpoint: Path) -> None:
    assert f"corrupt content for reference {ref[1:]}: file {path} " in message, message
    assert f"of checkpoint {checkpoint} " in message, message
    assert "Restore the content folder" in message and "fresh checkpoint" in message


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corrupt_pending_registration_stops_the_step_and_is_never_dead_lettered(checkpoint, how):
    """The registration is valid and parked; its topic table's file is damaged before the
    watermark reaches it. Applying it stops the step with the store's message: no internal
    error dead letter (LazyTopicTable decodes it inside apply_guarded's last line of defence)."""
    saved, settings, ref = _parked(checkpoint)
    path = _corrupt(settings, ref, how)
    with pytest.raises(CorruptContentError) as failure:
        run_step([], group_state(saved, T0), T0 + 10_000, group="broker-f", content=settings)
    _assert_names_the_fix(str(failure.value), ref, path, checkpoint)


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corrupt_state_reference_stops_the_step_naming_its_file(checkpoint, how):
    """The group's own topics in its saved state, read when the state is loaded."""
    saved, settings, _ = _parked(checkpoint)
    state = group_state(saved, T0)
    run_step([], state, T0 + 10_000, group="broker-f", content=settings)  # applied
    topics = state.get[1]
    path = _corrupt(settings, topics, how)
    with pytest.raises(CorruptContentError) as failure:
        run_step([], group_state(tuple(state.get), T0 + 10_000), T0 + 20_000, "broker-f", settings)
    _assert_names_the_fix(str(failure.value), topics, path, checkpoint)


def test_a_storage_error_in_the_step_past_the_retries_fails_it(checkpoint, monkeypatch):
    saved, settings, _ = _parked(checkpoint)
    CONTENT.clear()
    _fail_reads(monkeypatch, Faults(checkpoint, first=1000))
    with pytest.raises(ContentStorageError):
        run_step([], group_state(saved, T0), T0 + 10_000, group="broker-f", content=settings)


@pytest.mark.parametrize("seed", [3, 11])
def test_storage_errors_retried_in_stage_one_and_the_step_give_the_replay(
    seed, tmp_path, monkeypatch
):
    """Every third read and rename of a content file fails; each batch starts with an empty
    cache, so every reference is read from the folder: the tables equal the replay."""
    rng = random.Random(seed)
    events = [
        parse_event(json.dumps(r)) for r in registration_modes(random_history(seed, rng), rng)
    ]
    faults = Faults(tmp_path, every=3)
    _fail_renames(monkeypatch, faults)
    _fail_reads(monkeypatch, faults)
    model = StreamModel(DELAY_MS, True, backend=ContentFolder(str(tmp_path / "content"), 3, 0.0))
    i = 0
    while i < len(events):
        size = rng.randint(1, 30)
        CONTENT.clear()
        model.batch([(e, ("file", i + n)) for n, e in enumerate(events[i : i + size])])
        i += size
    final = max(e.eventTime for e in events) - DELAY_MS
    model.finish(final)
    assert faults.failed > 10
    assert model.dump() == project(replay_dump(events, final))


# ---- durability --------------------------------------------------------------------------


def test_a_local_write_fsyncs_the_file_and_then_its_folder(tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    ContentFolder(str(tmp_path / "content")).write("\x1d" + "0" * 32, "text")
    assert synced == ["file", "folder"]


def _chunk_items(count: int) -> list[tuple[str, str]]:
    texts = [f"chunk {i} " * 50 for i in range(count)]
    return [(content_ref(text), text) for text in texts]


def test_a_batched_local_write_fsyncs_every_file_before_its_rename_and_folders_after(
    tmp_path, monkeypatch
):
    folder = ContentFolder(str(tmp_path / "content"))
    items = _chunk_items(12)
    old_ref, old_text = items[0]
    folder.write(old_ref, old_text)  # there already: only touched
    order: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        order.append((kind, os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        order.append(("rename", str(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    folder.write_many(items)
    for ref, text in items:
        path = Path(content_path(folder.name, ref[1:]))
        assert path.read_text() == text
    kinds = [kind for kind, _ in order]
    new = len(items) - 1
    assert kinds == ["file"] * new + ["rename"] * new + ["folder"] * (len(kinds) - 2 * new)
    # each new file's data was fsynced under the name it was renamed from
    assert sorted(p for k, p in order if k == "file") == sorted(
        p for k, p in order if k == "rename"
    )
    renamed_into = {str(Path(content_path(folder.name, r[1:])).parent) for r, _ in items[1:]}
    assert {p for k, p in order if k == "folder"} == renamed_into
    assert not list((tmp_path / "content").rglob(".tmp-*"))


def test_a_batched_local_write_retries_renames_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    faults = Faults(tmp_path, first=2)
    _fail_renames(monkeypatch, faults)
    folder = ContentFolder(str(tmp_path / "content"), 3, 0.0)
    items = _chunk_items(5)
    folder.write_many(items)
    assert faults.failed == 2
    assert all(folder.read(ref) == text for ref, text in items)
    _fail_renames(monkeypatch, Faults(tmp_path, first=1000))
    with pytest.raises(ContentStorageError, match="failed 3 times"):
        folder.write_many(_chunk_items(9)[5:])
    assert not list((tmp_path / "content").rglob(".tmp-*"))


# ---- what the operator reads -------------------------------------------------------------


def test_the_query_failure_names_the_missing_content_and_the_fix(tmp_path):
    places = JobPlaces(str(tmp_path / "w"), str(tmp_path / "cp"), "127.0.0.1:9092", "events")
    detail = (
        "org.apache.spark.SparkException: Job aborted due to stage failure\n"
        '  File "/x/step.py", line 3, in step\n'
        "routing_lib.core.content.MissingContentError: no content for reference abc: file "
        f"{tmp_path}/cp/content/ab/abc of checkpoint {tmp_path}/cp is missing. Restore the "
        "content folder together with the checkpoint\n\tat org.apache.spark.api.python..."
    )
    summary = explain(detail, places)
    assert summary.startswith(f"content missing under checkpoint {tmp_path}/cp")
    assert f"{tmp_path}/cp/content/ab/abc" in summary and "Restore the content folder" in summary
    storage = explain("x\npyarrow ContentStorageError: content store: writing f failed", places)
    assert "kept failing" in storage and "restart the job" in storage
