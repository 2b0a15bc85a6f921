"""Topic tables already validated: stage one's shortcut for registrations that are new records
but carry a table seen before.

A topic change reaches stage one as a new record from the master and, seconds later, from
each slave (the same table, another brokerAddr and brokerId); a restart or a role switch sends
a new dataVersion or id with the table unchanged. KnownRecords (routing_lib/known_records.py)
cannot help: the bytes differ outside the eventTime. But the topicConfigTable value, ~1 MB of
the record, is byte for byte one seen before. So stage one cuts that value out, validates the
rest of the record (a few hundred bytes, with `{}` in the table's place) and takes the table's
validated, packed form from memory, keyed by a hash of its bytes: a hash instead of a parse.

Why the verdict and the packed event cannot differ from a full validation
(tests/test_known_tables.py checks both on the simulator's records and every bad-record kind):
- the cut is taken only when the record holds `"topicConfigTable"` exactly once and no
  backslash at all (so no string holds a quote or a brace that could fool the cut), followed
  by `:` and `{` (a key, not a value); the cut's end is the first `}` `}` after it;
- the shortcut is taken only when the record with `{}` in the cut's place validates as a
  REGISTER and the cut bytes validate on their own as the field's type (one complete JSON
  object: a wrong end leaves it unbalanced or with trailing bytes, and it is refused). Then
  the record is that registration with that table: a JSON value is replaced by another at the
  one place the required top-level key can be, and the model's fields are validated one by
  one; the table's one cross-check (each key is its topicName) is made on the table here;
- anything else (a refusal, a small table) takes the full path, which gives the reason.

Across processes (stage one's Python workers each meet every broker's table): a table
validated in one process is published under its hash in an index beside the content store
(routing_lib/shared_tables.py) once its content reference is durable; another process that
does not know the hash takes the reference from there instead of validating the table again.
The reference names the packed table the other process made from the same bytes, with the
same code (the index is keyed by a fingerprint of the table's schema and packed form too).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from typing import Any, Protocol

from pydantic import TypeAdapter, ValidationError

from routing_lib.core.wire import pack_register, packed_table
from schemas.route_event import PipelineRegister, ValidationFailure, parse_pipeline_event

_TABLE_KEY = b'"topicConfigTable"'
_TABLE_OPEN = re.compile(rb'"topicConfigTable"[ \t\r\n]*:[ \t\r\n]*\{')
_TABLE_CLOSE = re.compile(rb"\}[ \t\r\n]*\}")
# PipelineRegister's topicConfigTable field type, validated on its own
_TABLE_ADAPTER: TypeAdapter[dict[str, Any]] = TypeAdapter(
    PipelineRegister.model_fields["topicConfigTable"].annotation  # type: ignore[arg-type,maybe-unrecognized-str-typeform]
)
# Below this many bytes a table costs little to validate: the full path takes it.
MIN_TABLE_BYTES = 4096


def _table_format() -> bytes:
    """A fingerprint of what validating a table and packing it make: the table type's core
    schema and the packed form of a sample table (either changing changes it)."""
    sample = {"t": {"topicName": "t", "readQueueNums": 2, "perm": 6, "order": True}}
    # a schema's 'ref' ends with the id() of its class in this process: left out
    schema = re.sub(r"('ref': '[^']*):\d+'", r"\1'", repr(_TABLE_ADAPTER.core_schema))
    text = schema + packed_table(sample)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


# keys tables shared between processes (routing_lib/shared_tables.py)
TABLE_FORMAT = _table_format()


def table_span(raw: bytes) -> tuple[int, int] | None:
    """Where the record's topicConfigTable value is, or None when it cannot be cut safely."""
    if raw.count(_TABLE_KEY) != 1 or b"\\" in raw:
        return None
    opened = _TABLE_OPEN.search(raw)
    if opened is None:
        return None
    start = opened.end() - 1
    closed = _TABLE_CLOSE.search(raw, start)
    if closed is None:
        return None
    return start, closed.end()


def _validated_table(segment: bytes) -> str | None:
    """The packed form of a topicConfigTable's bytes, or None when they are not a valid
    table on their own (the full path then decides)."""
    try:
        table = _TABLE_ADAPTER.validate_json(segment)
    except ValidationError:
        return None
    # RegisterEvent's model check: each key is its config's topicName
    if any(key != config["topicName"] for key, config in table.items()):
        return None
    return packed_table(table)


class TableIndex(Protocol):
    """Packed tables that other processes validated, by the hash of their bytes."""

    def adopt(self, key: bytes) -> str | None:
        """The packed form (a content reference) another process published for `key`, made
        durable for this process; None when there is none (or its content is gone)."""
        ...


class KnownTables:
    """An LRU of packed topic tables by the hash of their bytes, bounded by their size. An
    entry is the table's packed text, or its content reference when taken from an index."""

    def __init__(self, max_bytes: int = 128 * 1024 * 1024, min_table_bytes: int = MIN_TABLE_BYTES):
        self.max_bytes = max_bytes
        self.min_table_bytes = min_table_bytes
        self._tables: OrderedDict[bytes, str] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.adopted = 0  # tables taken from an index
        # the key of the table the last `classify` validated here, until `take_validated`
        self._validated: bytes | None = None

    def classify(
        self, raw: bytes, index: TableIndex | None = None
    ) -> tuple[PipelineRegister, str] | None:
        """(the validated registration without its table, the packed registration) for a
        registration record whose table can be cut out; None: validate the record in full.
        A table this process does not know is looked up in `index` before it is validated."""
        self._validated = None
        span = table_span(raw)
        if span is None or span[1] - span[0] < self.min_table_bytes:
            return None
        start, end = span
        try:
            head = parse_pipeline_event(raw[:start] + b"{}" + raw[end:])
        except ValidationFailure:
            return None
        if not isinstance(head, PipelineRegister):
            return None
        segment = memoryview(raw)[start:end]
        key = hashlib.blake2b(segment, digest_size=16).digest()
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            self.hits += 1
        elif index is not None and (table := index.adopt(key)) is not None:
            self._remember(key, table)
            self.adopted += 1
        else:
            table = _validated_table(bytes(segment))
            if table is None:
                return None
            self._remember(key, table)
            self._validated = key
        return head, pack_register(head, table)

    def take_validated(self) -> bytes | None:
        """The key of the table the last `classify` call validated in this process (None if it
        validated none), once: the caller publishes it when its reference is durable."""
        key, self._validated = self._validated, None
        return key

    def forget(self, raw: bytes) -> None:
        """Drop the entry of the record's table (its content reference named content that is
        gone: the record is validated afresh)."""
        span = table_span(raw)
        if span is None:
            return
        key = hashlib.blake2b(memoryview(raw)[span[0] : span[1]], digest_size=16).digest()
        table = self._tables.pop(key, None)
        if table is not None:
            self._bytes -= len(table)

    def _remember(self, key: bytes, table: str) -> None:
        self._tables[key] = table
        self._bytes += len(table)
        while self._bytes > self.max_bytes and self._tables:
            _, evicted = self._tables.popitem(last=False)
            self._bytes -= len(evicted)

    def __len__(self) -> int:
        return len(self._tables)
