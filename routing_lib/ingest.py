"""Stage one of the pipeline, pure Python: raw records -> valid events or dead letters.

A raw record is an archive line (source = file path, position = line number) or a Kafka
message (source = topic-partition, position = offset). Both paths call `classify`.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from routing_lib.content_files import ContentSettings
from routing_lib.core.admin import group_key
from routing_lib.core.content import CONTENT, MissingContentError
from routing_lib.core.rows import internal_error_reason
from routing_lib.core.wire import externalize, pack_event, topics_ref
from routing_lib.known_records import KnownRecords, cut_event_time
from routing_lib.known_tables import KnownTables
from routing_lib.shared_tables import table_index
from schemas.route_event import (
    INT64_MAX,
    INT64_MIN,
    AnyEvent,
    TickEvent,
    ValidationFailure,
    parse_pipeline_event,
)

log = logging.getLogger("routelake.ingest")

# Group keys that are not broker names (a broker name is never empty, so these cannot clash).
DEAD_LETTER_KEY = "\x00dead-letter"
CLOCK_KEY = "\x00clock"  # a backfill's --as-of tick (not an input record)
TICK_KEY = "\x00tick"  # a collector's TICK events: input records that only move the watermark

# Whose clock an eventTime was checked against, as the dead-letter reason names it.
JOB_CLOCK = "the job clock"
BACKFILL_CLOCK = "the backfill's wall clock"
# What a backfill's reason adds: the way out for archives dated ahead on purpose.
FUTURE_ARCHIVE_HINT = (
    "an archive from the future? synthetic archives: routectl backfill --allow-future-events"
)


# Per process (a Spark Python worker lives across micro-batches): re-sent records skip
# validation (routing_lib/known_records.py).
KNOWN_RECORDS = KnownRecords()
# And registrations that are new records with a known topic table (a topic change re-sent by
# each slave, a restart, a role switch) validate only their head (routing_lib/known_tables.py).
KNOWN_TABLES = KnownTables()


@dataclass(frozen=True)
class Classified:
    group_key: str  # brokerName, or DEAD_LETTER_KEY
    event_time: int  # 0 for dead letters: they must not move the watermark
    source: str
    position: int
    payload: str | None  # the validated event, packed (routing_lib.core.wire)
    raw: bytes | None  # dead letters only
    reason: str | None  # dead letters only


def classify(
    raw: bytes,
    source: str,
    position: int,
    now_ms: int | None,
    max_future_skew_ms: int,
    clock: str = JOB_CLOCK,
    store: ContentSettings | None = None,
    known_records: bool = True,
) -> Classified:
    """Validate one record. `now_ms` is `clock` (the job's, or a backfill's wall clock): an
    eventTime more than `max_future_skew_ms` ahead of it is a dead letter; None: no skew check.
    With `store`, a registration's large topic table leaves as a content reference
    (routing_lib/core/content.py), its text stored there first.

    Whatever goes wrong with one record's validation makes that record a dead letter, so one
    poison record cannot stop a backfill or halt the stream at its offset forever. Storing
    its topic table is outside that net: a storage error (retried by the store first) fails
    the task, which Spark retries; a valid registration never becomes a dead letter for it.
    `known_records` False: validate in full even when a known record's template matches.
    """
    cut = None
    known = False
    validated_table = None  # the key of a table this call validated, to publish once stored
    try:
        cut = cut_event_time(raw)
        template = KNOWN_RECORDS.lookup(cut) if cut is not None and known_records else None
        event_time = cut[1] if cut is not None else 0
        if template is not None and (now_ms is None or event_time <= now_ms + max_future_skew_ms):
            classified = Classified(
                template.group_key,
                event_time,
                source,
                position,
                template.packed(event_time),
                None,
                None,
            )
            known = True
        else:
            classified = _classify(
                raw, source, position, now_ms, max_future_skew_ms, clock, store, known_records
            )
            validated_table = KNOWN_TABLES.take_validated()
            if not INT64_MIN <= classified.event_time <= INT64_MAX:  # Arrow would refuse the row
                raise OverflowError(f"eventTime {classified.event_time} does not fit a BIGINT")
    except Exception as exc:  # the last line of defence: the schema should have caught it
        KNOWN_TABLES.take_validated()  # not this record's to publish
        log.warning("record %s:%s failed validation unexpectedly: %r", source, position, exc)
        return dead_letter(raw, source, position, internal_error_reason(exc))
    if classified.payload is None or store is None:
        stored = classified.payload
    else:
        try:
            stored = _stored(classified.payload, store)
        except MissingContentError:
            if not known_records:
                raise  # validated in full here: its table was just stored, not read
            # the table of the record's template, or of a known table taken by reference,
            # went from memory and from the store (collected while no state named it): the
            # record itself still holds it, so classify it afresh (its template is remembered
            # anew, with the table validated and stored again)
            KNOWN_TABLES.forget(raw)
            return classify(
                raw, source, position, now_ms, max_future_skew_ms, clock, store, known_records=False
            )
        ref = topics_ref(stored) if validated_table is not None else None
        index = table_index(store) if ref is not None else None
        if validated_table is not None and ref is not None and index is not None:
            # once durable (at the end of a Kafka frame's deferred writes), other processes
            # may take it instead of validating the table
            publish, key = index.publish, validated_table
            CONTENT.when_durable(lambda: publish(key, ref))
    if stored is not classified.payload:
        classified = dataclasses.replace(classified, payload=stored)
    if not known and cut is not None and classified.payload is not None:
        KNOWN_RECORDS.remember(cut, classified.group_key, classified.event_time, classified.payload)
    return classified


def _stored(packed: str, store: ContentSettings | None) -> str:
    if store is None:
        return packed
    return externalize(packed, store.backend(), store.min_chars)


def _classify(
    raw: bytes,
    source: str,
    position: int,
    now_ms: int | None,
    max_future_skew_ms: int,
    clock: str,
    store: ContentSettings | None = None,
    known_tables: bool = True,
) -> Classified:
    packed = None
    event: AnyEvent
    try:
        # with a content store, a table another process validated is taken by reference
        index = table_index(store) if store is not None and known_tables else None
        split = KNOWN_TABLES.classify(raw, index) if known_tables else None
        if split is not None:  # a registration whose table is known: its head validated
            event, packed = split
        else:
            event = parse_pipeline_event(raw)
        if now_ms is not None and event.eventTime > now_ms + max_future_skew_ms:
            raise ValidationFailure(skew_reason(event.eventTime, now_ms, max_future_skew_ms, clock))
    except ValidationFailure as failure:
        return dead_letter(raw, source, position, failure.reason)
    if isinstance(event, TickEvent):
        return Classified(TICK_KEY, event.eventTime, source, position, None, None, None)
    return Classified(
        group_key(event),
        event.eventTime,
        source,
        position,
        packed if packed is not None else pack_event(event),
        None,
        None,
    )


def skew_reason(event_time: int, now_ms: int, max_future_skew_ms: int, clock: str) -> str:
    cause = "clock skew" if clock == JOB_CLOCK else FUTURE_ARCHIVE_HINT
    return (
        f"eventTime {event_time} is more than {max_future_skew_ms} ms ahead of {clock} "
        f"{now_ms} ({cause})"
    )


def dead_letter(raw: bytes, source: str, position: int, reason: str) -> Classified:
    return Classified(DEAD_LETTER_KEY, 0, source, position, None, raw, reason)


def archive_records(
    path: str,
    content: bytes,
    now_ms: int | None,
    max_future_skew_ms: int,
    store: ContentSettings | None = None,
) -> Iterator[Classified]:
    """Classify every line of a .jsonl or .jsonl.gz archive (positions are line numbers from 1).
    `now_ms`: the backfill's wall clock, or None when archives may be dated in the future;
    `store`: where large topic tables go (see `classify`).

    Blank lines are records (dead-lettered as empty); the newline that ends the file is not.
    """
    if path.endswith(".gz"):
        try:
            content = gzip.decompress(content)
        except (OSError, EOFError, zlib.error) as exc:
            yield dead_letter(content[:4096], path, 0, f"corrupt gzip archive: {exc}")
            return
    lines = content.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        yield classify(
            line.removesuffix(b"\r"),
            path,
            number,
            now_ms,
            max_future_skew_ms,
            BACKFILL_CLOCK,
            store,
        )
