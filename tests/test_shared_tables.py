"""Topic tables shared between stage one's processes (routing_lib/shared_tables.py): a table one
process validated and stored is taken by reference in another, with the payload a validation
there gives; whatever is wrong with an entry makes it a miss."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from routing_lib import ingest
from routing_lib.content_files import ContentSettings
from routing_lib.content_gc import sweep
from routing_lib.core.content import CONTENT
from routing_lib.core.wire import topics_ref
from routing_lib.known_records import KnownRecords
from routing_lib.known_tables import KnownTables
from routing_lib.shared_tables import INDEX_FOLDER, table_index
from tests.support.helpers import register_record

TOPICS = 300  # a table past MIN_TABLE_BYTES: the shortcut's size


def registration(broker_id: int, tag: str, topics: int = TOPICS) -> bytes:
    """A registration of `topics` topics, the same table for every broker id. `tag` names
    them: each test its own table (the process's content store reads every folder a test
    attached, so another test's copy of a table would hide one that is gone)."""
    record = register_record(1_000, "C", f"10.0.0.{broker_id + 1}", "broker-a", "T0")
    record["brokerId"] = broker_id
    record["topicConfigTable"] = {
        f"{tag}{i}": {"topicName": f"{tag}{i}", "readQueueNums": 8, "writeQueueNums": 8}
        for i in range(topics)
    }
    return json.dumps(record).encode()


def classify_in_this_process(raw: bytes, content: str) -> tuple[tuple, int]:
    """(the classified row, the tables taken from the index)."""
    store = ContentSettings(content, min_chars=4096)
    c = ingest.classify(raw, "archive", 1, None, 0, store=store)
    return (c.group_key, c.event_time, c.payload, c.reason), ingest.KNOWN_TABLES.adopted


def in_a_new_process(raw: bytes, content: str) -> tuple[tuple, int]:
    """As a new Python worker would: a process with nothing in memory."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(classify_in_this_process, raw, content).result()


def entries(content: Path) -> list[Path]:
    folder = content / INDEX_FOLDER
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_a_table_validated_in_one_process_is_taken_by_reference_in_another(tmp_path: Path):
    shared = tmp_path / "shared" / "content"
    master, slave = registration(0, tmp_path.name), registration(1, tmp_path.name)
    first, adopted = in_a_new_process(master, str(shared))
    assert adopted == 0 and first[3] is None
    assert len(entries(shared)) == 1  # published once its content was stored

    second, adopted = in_a_new_process(slave, str(shared))
    assert adopted == 1
    # what a process with no index gives for the same record: the same payload, reference
    alone, adopted_alone = in_a_new_process(slave, str(tmp_path / "alone" / "content"))
    assert adopted_alone == 0
    assert second == alone and topics_ref(second[2] or "") == topics_ref(first[2] or "")
    assert len(entries(shared)) == 1  # taken, not published again


@pytest.fixture
def fresh_worker():
    """This process's stage-one memory and content store as a new worker has them."""
    saved = ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES
    ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES = KnownRecords(), KnownTables()
    CONTENT.clear()
    yield
    ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES = saved
    CONTENT.clear()


def classified(raw: bytes, store: ContentSettings) -> tuple:
    c = ingest.classify(raw, "archive", 1, None, 0, store=store)
    return (c.group_key, c.event_time, c.payload, c.reason)


def forget_in_memory() -> None:
    """What another process would not have: this one's known records, tables and content."""
    ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES = KnownRecords(), KnownTables()
    CONTENT.clear()


def full_validation(raw: bytes, store: ContentSettings) -> tuple:
    c = ingest.classify(raw, "archive", 1, None, 0, store=store, known_records=False)
    return (c.group_key, c.event_time, c.payload, c.reason)


def test_an_entry_naming_content_that_is_gone_is_a_miss(tmp_path: Path, fresh_worker):
    content = tmp_path / "content"
    store = ContentSettings(str(content), min_chars=4096)
    master, slave = registration(0, tmp_path.name), registration(1, tmp_path.name)
    classified(master, store)
    (entry,) = entries(content)
    # the content collected (no state named it), the entry still there
    for folder in content.iterdir():
        if folder.name != INDEX_FOLDER:
            shutil.rmtree(folder)
    forget_in_memory()
    result = classified(slave, store)
    assert ingest.KNOWN_TABLES.adopted == 0  # validated here
    assert result == full_validation(slave, store) and result[3] is None
    ref = topics_ref(result[2] or "")
    assert ref is not None and (content / ref[1:3] / ref[1:]).is_file()  # stored again


@pytest.mark.parametrize("text", ["", "not a reference", "\x1c" + "0" * 31])
def test_an_entry_that_is_not_a_reference_is_a_miss(tmp_path: Path, fresh_worker, text):
    content = tmp_path / "content"
    store = ContentSettings(str(content), min_chars=4096)
    master, slave = registration(0, tmp_path.name), registration(1, tmp_path.name)
    classified(master, store)
    (entry,) = entries(content)
    entry.write_text(text)
    forget_in_memory()
    result = classified(slave, store)
    assert ingest.KNOWN_TABLES.adopted == 0
    assert result == full_validation(slave, store)


def test_a_table_taken_by_reference_whose_content_went_is_validated_afresh(
    tmp_path: Path, fresh_worker
):
    content = tmp_path / "content"
    store = ContentSettings(str(content), min_chars=4096)
    classified(registration(0, tmp_path.name), store)
    forget_in_memory()
    taken = classified(registration(1, tmp_path.name), store)
    assert ingest.KNOWN_TABLES.adopted == 1  # this process holds the table as a reference
    ref = topics_ref(taken[2] or "")
    # then its content is collected and leaves this process's memory too
    shutil.rmtree(content)
    CONTENT.clear()
    third = registration(2, tmp_path.name)  # a new record (no template) with the known table
    result = classified(third, store)
    assert result == full_validation(third, store) and result[3] is None
    assert topics_ref(result[2] or "") == ref
    assert ref is not None and (content / ref[1:3] / ref[1:]).is_file()  # stored again


def test_another_format_of_the_packed_table_keys_other_entries(tmp_path: Path, monkeypatch):
    import routing_lib.shared_tables as shared_tables

    index = table_index(ContentSettings(str(tmp_path / "content"), min_chars=4096))
    assert index is not None
    key = os.urandom(16)
    now = index.entry(key)
    monkeypatch.setattr(shared_tables, "TABLE_FORMAT", b"another version of the code")
    assert index.entry(key) != now


def test_the_collector_deletes_entries_past_its_grace(tmp_path: Path, fresh_worker):
    content = tmp_path / "content"
    store = ContentSettings(str(content), min_chars=4096)
    classified(registration(0, tmp_path.name), store)
    (old,) = entries(content)
    stamp = time.time() - 3_600
    os.utime(old, (stamp, stamp))
    index = table_index(store)
    assert index is not None
    young = Path(index.entry(b"\x01" * 16))
    index.publish(
        b"\x01" * 16, topics_ref(classified(registration(1, tmp_path.name), store)[2] or "") or ""
    )
    assert young.is_file()
    report = sweep(str(content), set(), time.time(), grace_s=600)
    assert not old.exists() and young.exists()
    assert report.deleted_files >= 1


def test_object_storage_has_no_index():
    """Taking a table there would read every chunk back: slower than validating it."""
    assert table_index(ContentSettings("s3://bucket/checkpoint/content", min_chars=4096)) is None


def test_inside_deferred_writes_an_entry_waits_for_its_content_and_gone_content_is_a_miss(
    tmp_path: Path, fresh_worker
):
    """Stage one on Kafka classifies a frame inside CONTENT.deferred_writes: a table's files
    are written at the block's end, so its entry is published only then (another worker must
    not take a reference whose files are not there yet); and a taken entry's content is read
    at once, not only queued, so content that is gone is a miss there too."""
    content = tmp_path / "content"
    store = ContentSettings(str(content), min_chars=4096)
    master, slave = registration(0, tmp_path.name), registration(1, tmp_path.name)
    with CONTENT.deferred_writes():
        classified(master, store)
        assert entries(content) == []  # nothing durable yet, nothing published
    assert len(entries(content)) == 1
    for folder in content.iterdir():
        if folder.name != INDEX_FOLDER:
            shutil.rmtree(folder)
    forget_in_memory()
    with CONTENT.deferred_writes():
        result = classified(slave, store)
        assert ingest.KNOWN_TABLES.adopted == 0  # validated here, not taken
    assert result == full_validation(slave, store) and result[3] is None
