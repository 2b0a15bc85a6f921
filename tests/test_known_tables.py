"""Stage one's shortcut for registrations with a known topic table (routing_lib/known_tables.py)
gives exactly what full validation gives: same verdict, same reason, same packed event."""

from __future__ import annotations

import json

import pytest

from routelake_dev.simulator import EventEncoder, iter_history
from routing_lib import ingest
from routing_lib.known_records import KnownRecords
from routing_lib.known_tables import KnownTables, table_span
from tests.support.bad_records import _GOOD, _HEARTBEAT, BAD_RECORDS, INTEGER_RANGE_RECORDS


def classified(raw: bytes, tables: KnownTables) -> tuple:
    """classify with `tables` as the known tables and no known records (each record on its
    own, so only the table shortcut is in play)."""
    saved = ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES
    ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES = KnownRecords(max_bytes=0), tables
    try:
        c = ingest.classify(raw, "src", 7, None, 60_000)
    finally:
        ingest.KNOWN_RECORDS, ingest.KNOWN_TABLES = saved
    return (c.group_key, c.event_time, c.payload, c.reason, c.raw)


def reference(raw: bytes) -> tuple:
    return classified(raw, KnownTables(min_table_bytes=10**12))  # never cut: the full path


def big_register(**changes) -> dict:
    table = {
        f"Topic{i}": {"topicName": f"Topic{i}", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}
        for i in range(300)
    }
    return {**_GOOD, "topicConfigTable": table, **changes}


def test_the_simulators_registrations_classify_as_in_full():
    tables = KnownTables()
    encode = EventEncoder()
    history = iter_history(
        "known-tables", 4, 400, 240_000, 30_000, 1_764_000_000_000, fault_interval_ms=5_000
    )
    registrations = 0
    for event in history:
        raw = encode(event)
        assert classified(raw, tables) == reference(raw)
        registrations += event["eventType"] == "REGISTER"
    # slaves re-send each table, faults re-send it with a new head: most are shortcuts
    assert registrations > 40 and tables.hits > registrations // 2


@pytest.mark.parametrize("min_table_bytes", [0, 4096])
def test_bad_records_after_known_tables_classify_as_in_full(min_table_bytes):
    tables = KnownTables(min_table_bytes=min_table_bytes)
    for good in (_GOOD, big_register()):
        raw = json.dumps(good).encode()
        assert classified(raw, tables) == reference(raw)
    for kind, raw, _ in BAD_RECORDS + INTEGER_RANGE_RECORDS:
        assert classified(raw, tables) == reference(raw), kind


def _texts() -> dict[str, str]:
    """Registrations whose table a cut could misread, each as JSON text."""
    good = json.dumps(big_register())
    table = json.dumps(big_register()["topicConfigTable"])
    nested = big_register()
    nested["topicConfigTable"]["Topic3"]["extra"] = {"x": {"y": 1}}  # '}}' inside the table
    braces = big_register()
    braces["topicConfigTable"]["Topic5"]["topicName"] = "a}}b"  # invalid, with '}}' in a string
    mismatch = big_register()
    mismatch["topicConfigTable"]["Topic7"]["topicName"] = "Other"
    return {
        "good": good,
        "spaced": good.replace('"topicConfigTable": {', '"topicConfigTable" :\n\t{ '),
        "table last": json.dumps(
            {k: v for k, v in big_register().items() if k != "topicConfigTable"}
            | {"topicConfigTable": big_register()["topicConfigTable"]}
        ),
        "nested extra": json.dumps(nested),
        "braces in a name": json.dumps(braces),
        "key not its name": json.dumps(mismatch),
        "empty table": json.dumps(big_register(topicConfigTable={})),
        "empty table, big head": json.dumps(
            big_register(topicConfigTable={}, filterServerList=["x" * 5000])
        ),
        "duplicate key": good[:-1] + ', "topicConfigTable": {}}',
        "table in another field": json.dumps(
            {k: v for k, v in big_register().items() if k != "topicConfigTable"}
            | {"dataVersion": {"stateVersion": 0, "topicConfigTable": json.loads(table)}}
        ),
        "heartbeat with a table": json.dumps({**_HEARTBEAT, "topicConfigTable": json.loads(table)}),
        "escape elsewhere": good.replace('"BadCluster"', '"Bad\\u0043luster"'),
        "bad port": json.dumps(big_register(brokerAddr="10.8.0.1:99999")),
        "bad head": json.dumps(big_register(brokerId=-1)),
        "not json after": good + "x",
        "truncated": good[: len(good) // 2],
    }


@pytest.mark.parametrize("name", list(_texts()))
def test_cuts_that_could_mislead_classify_as_in_full(name):
    tables = KnownTables()
    primer = json.dumps(big_register(brokerAddr="10.8.0.2:10911")).encode()
    classified(primer, tables)  # the good table is known
    raw = _texts()[name].encode()
    assert classified(raw, tables) == reference(raw)
    assert classified(raw, tables) == reference(raw)  # and again, once remembered


def test_a_known_table_is_a_hit_and_the_cut_is_the_table():
    raw = json.dumps(big_register()).encode()
    start, end = table_span(raw)
    assert json.loads(raw[start:end]) == big_register()["topicConfigTable"]
    tables = KnownTables()
    classified(raw, tables)
    other = json.dumps(big_register(brokerAddr="10.8.0.3:10911", brokerId=1)).encode()
    assert classified(other, tables) == reference(other)
    assert tables.hits == 1 and len(tables) == 1


def test_the_tables_are_bounded_by_bytes():
    tables = KnownTables(max_bytes=30_000, min_table_bytes=0)
    for n in range(20):
        record = big_register()
        record["topicConfigTable"][f"Extra{n}"] = {"topicName": f"Extra{n}"}
        classified(json.dumps(record).encode(), tables)
    assert 0 < len(tables) < 20
