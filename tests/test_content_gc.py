"""The content collector's sweep (routing_lib/content_gc.py) and the store's freshness rule it
relies on: unreferenced old files go, referenced or recently written ones stay, a file a writer
refreshes while the sweep runs stays, and crashed writers' temporary files go."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from routing_lib.content_files import ContentFolder
from routing_lib.content_gc import _Entry, _retire, check_grace, content_size, sweep
from routing_lib.core.content import ContentStore, content_ref

pytestmark = pytest.mark.unit

HOUR = 3600.0


def _write(folder: ContentFolder, text: str, age_s: float) -> Path:
    ref = content_ref(text)
    folder.write(ref, text)
    path = Path(folder.name) / ref[1:3] / ref[1:]
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_sweep_deletes_only_unreferenced_files_older_than_the_grace(tmp_path):
    folder = ContentFolder(str(tmp_path / "content"))
    referenced = _write(folder, "in a state version", 5 * HOUR)
    unreferenced = _write(folder, "nothing names me", 5 * HOUR)
    recent = _write(folder, "written a minute ago", 60)
    old_temporary = referenced.parent / ".tmp-crashed"
    old_temporary.write_text("half")
    os.utime(old_temporary, (time.time() - 5 * HOUR,) * 2)
    new_temporary = referenced.parent / ".tmp-writing"
    new_temporary.write_text("half")

    report = sweep(folder.name, {referenced.name}, time.time(), HOUR)

    assert referenced.exists() and recent.exists() and new_temporary.exists()
    assert not unreferenced.exists() and not old_temporary.exists()
    assert (report.deleted_files, report.deleted_temporaries, report.kept_files) == (1, 1, 2)
    assert report.deleted == [unreferenced.name]
    files, size = content_size(folder.name)
    assert files == 3 and size == referenced.stat().st_size + recent.stat().st_size + 4


def test_dry_run_deletes_nothing(tmp_path):
    folder = ContentFolder(str(tmp_path / "content"))
    path = _write(folder, "old", 5 * HOUR)
    assert sweep(folder.name, set(), time.time(), HOUR, dry_run=True).deleted == [path.name]
    assert path.exists()


def test_a_file_a_writer_refreshes_during_the_sweep_stays(tmp_path):
    folder = ContentFolder(str(tmp_path / "content"))
    text = "re-sent after a long while"
    path = _write(folder, text, 5 * HOUR)
    listed = _Entry(str(path), path.name, path.stat().st_size, path.stat().st_mtime)
    folder.write(content_ref(text), text)  # a writer between the listing and the delete
    assert not _retire(listed, time.time() - HOUR, remote=False)
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no tombstone left


def test_the_store_refreshes_a_file_once_its_memo_is_stale(tmp_path):
    """A reference leaves the store only if its file was written or touched within
    freshness_s: what lets the collector trust a file's date."""
    folder = ContentFolder(str(tmp_path / "content"))
    store = ContentStore(freshness_s=HOUR)
    ref = store.put("some topics", folder)
    path = Path(folder.name) / ref[1:3] / ref[1:]
    os.utime(path, (time.time() - 5 * HOUR,) * 2)
    store.put("some topics", folder)  # within the window: no I/O
    assert path.stat().st_mtime < time.time() - 4 * HOUR
    store.freshness_s = 0.0
    store.put("some topics", folder)  # stale memo: touched again
    assert path.stat().st_mtime > time.time() - 60


def test_a_grace_period_shorter_than_the_freshness_window_is_refused():
    with pytest.raises(ValueError, match="too short"):
        check_grace(60)
    check_grace(HOUR)


def test_the_mark_finds_references_however_deep_their_json_escaping():
    """The pattern the mark runs over each state value's JSON (Spark's to_json): a reference
    in a column, and one inside a pending event's packed form inside the clock's JSON."""
    import json
    import re

    from routing_lib.content_gc import DIGEST_IN_TEXT

    column, pending = content_ref("a group's topics"), content_ref("a pending table")
    clock = json.dumps({"pending": [["f", 1, '{"eventType":"REGISTER"}\x1e' + pending]]})
    value = json.dumps({"clock": clock, "topics": column}).replace("\\u001d", "\\u001D")
    assert set(re.findall(DIGEST_IN_TEXT, value)) == {column[1:], pending[1:]}
    assert set(re.findall(DIGEST_IN_TEXT, column + clock)) == {column[1:], pending[1:]}


def test_routectl_refuses_a_content_collection_with_a_short_grace(capsys):
    from routing_lib.cli import main as routectl

    assert routectl(["housekeeping", "--content", "--content-grace-s", "60"]) == 2
    assert "too short" in capsys.readouterr().err


def test_routectl_refuses_to_collect_a_checkpoint_without_its_state(tmp_path, capsys):
    """A restore in progress: content/ is back, state/ not yet. No state version can mark
    anything, so a collection would delete every file older than the grace period."""
    from routing_lib.cli import main as routectl

    checkpoint = tmp_path / "checkpoint"
    old = _write(
        ContentFolder(str(checkpoint / "content")), "named by a state not restored", HOUR * 5
    )
    args = ["housekeeping", "--content", "--checkpoint", str(checkpoint)]
    assert routectl([*args, "--content-grace-s", str(HOUR)]) == 2
    said = capsys.readouterr().err
    assert f"checkpoint {checkpoint} has no state/ folder" in said and "restore" in said, said
    assert old.exists()
