"""Stage one's classification of a record (routing_lib/ingest.py) when a known record's
stored topic table is gone: classified afresh from the record itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from routing_lib.content_files import ContentSettings
from routing_lib.core.content import CONTENT
from routing_lib.core.wire import topics_ref
from routing_lib.ingest import classify
from tests.support.helpers import register_record


def test_a_known_record_whose_table_was_collected_is_classified_afresh(tmp_path: Path):
    content = tmp_path / "content"
    store = ContentSettings(str(content), min_chars=0)
    record = register_record(1_000, "C", "10.0.0.1", "broker-afresh", "AfreshTopic")
    first = classify(json.dumps(record).encode(), "archive", 1, None, 0, store=store)
    assert first.payload is not None
    ref = topics_ref(first.payload)
    assert ref is not None and (content / ref[1:3] / ref[1:]).is_file()

    # collected from the store while no state named it, and gone from this worker's memory
    shutil.rmtree(content)
    CONTENT.clear()
    again = json.dumps(dict(record, eventTime=2_000)).encode()  # known but for its eventTime
    second = classify(again, "archive", 2, None, 0, store=store)

    full = classify(again, "archive", 2, None, 0, store=store, known_records=False)
    assert second == full and second.reason is None
    assert topics_ref(second.payload or "") == ref
    assert (content / ref[1:3] / ref[1:]).is_file()  # stored again
