"""Stage one's shortcut for re-sent records (routing_lib/known_records.py) gives exactly what
full validation gives: same verdict, same reason, same packed event, whatever the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing_lib import ingest
from routing_lib.known_records import KnownRecords
from schemas.route_event import MAX_EVENT_TIME_MS
from tests.support.bad_records import _GOOD, _HEARTBEAT, BAD_RECORDS, INTEGER_RANGE_RECORDS

GOLDEN = Path(__file__).parent / "golden"
T = 1764000000500

# eventTime literals: accepted ones and every way the digits can make a record invalid
LITERALS = [
    "1764000000999",
    "1",
    str(MAX_EVENT_TIME_MS),
    str(MAX_EVENT_TIME_MS + 1),
    str(2**63),
    str(10**30),
    "0",
    "0123",
    "-5",
    "1.5",
    "1e12",
    "1764000000500.0",
    '"1764000000500"',
    "true",
    "null",
    "",
]


def with_event_time(record: dict, literal: str) -> bytes:
    text = json.dumps({**record, "eventTime": "\x00"})
    return text.replace('"\\u0000"', literal).encode()


def golden_records() -> list[dict]:
    records = []
    for path in sorted(GOLDEN.glob("*/events.jsonl")):
        for line in path.read_text().splitlines()[:30]:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("eventTime"), int):
                records.append(record)
    return records


BASES = [_GOOD, _HEARTBEAT, *golden_records()]


def classified(raw: bytes, known: KnownRecords, now_ms: int | None = None) -> tuple:
    original = ingest.KNOWN_RECORDS
    ingest.KNOWN_RECORDS = known
    try:
        c = ingest.classify(raw, "src", 7, now_ms, 60_000)
    finally:
        ingest.KNOWN_RECORDS = original
    return (c.group_key, c.event_time, c.payload, c.reason, c.raw)


def reference(raw: bytes, now_ms: int | None = None) -> tuple:
    return classified(raw, KnownRecords(max_bytes=0), now_ms)  # keeps nothing: full path


@pytest.mark.parametrize("base", BASES, ids=lambda r: f"{r.get('eventType')}-{r.get('eventTime')}")
def test_records_differing_only_in_event_time_classify_as_in_full(base):
    known = KnownRecords()
    primer = with_event_time(base, str(base.get("eventTime", T)))
    assert classified(primer, known) == reference(primer)
    for literal in LITERALS:
        raw = with_event_time(base, literal)
        assert classified(raw, known) == reference(raw), literal
    if reference(primer)[2] is not None:  # an accepted event is remembered and used
        assert len(known) == 1 and known.hits >= 3


def test_bad_records_after_a_known_good_one_classify_as_in_full():
    known = KnownRecords()
    classified(json.dumps(_GOOD).encode(), known)
    classified(json.dumps(_HEARTBEAT).encode(), known)
    for kind, raw, _ in BAD_RECORDS + INTEGER_RANGE_RECORDS:
        assert classified(raw, known) == reference(raw), kind


def test_an_escaped_second_event_time_key_is_not_templated():
    # JSON decoders read "event\u0054ime" as eventTime: the last of the two wins
    text = json.dumps(_HEARTBEAT).replace('"eventTime"', '"event\\u0054ime": 5, "eventTime"', 1)
    known = KnownRecords()
    for value in (5, 6):
        raw = text.replace(f'"eventTime": {_HEARTBEAT["eventTime"]}', f'"eventTime": {value}')
        assert classified(raw.encode(), known) == reference(raw.encode())
    assert len(known) == 0


def test_a_duplicated_event_time_key_is_not_templated():
    raw = json.dumps(_HEARTBEAT)[:-1] + f', "eventTime": {T + 1}}}'
    known = KnownRecords()
    assert classified(raw.encode(), known) == reference(raw.encode())
    assert len(known) == 0


def test_clock_skew_is_checked_on_known_records_too():
    known = KnownRecords()
    now = T + 1_000
    assert classified(with_event_time(_HEARTBEAT, str(T)), known, now)[3] is None
    ahead = with_event_time(_HEARTBEAT, str(now + 60_001))
    assert classified(ahead, known, now) == reference(ahead, now)
    assert "clock skew" in reference(ahead, now)[3]


def test_the_templates_are_bounded_by_bytes():
    known = KnownRecords(max_bytes=2_000)
    for n in range(50):
        classified(json.dumps({**_HEARTBEAT, "brokerName": f"b{n}"}).encode(), known)
    assert 0 < len(known) < 50
    assert sum(t.size for t in known._templates.values()) <= 2_000
