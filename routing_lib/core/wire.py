"""The compact form a validated event travels in between pipeline stages (and waits in state).

Stage one validates each record once with pydantic; later stages trust it and rebuild the
event with `model_construct`. A registration's topic configs are the bulk of the data and
rarely change (dataVersion gates them), so they stay an undecoded string until the state
machine needs them; their names travel separately so the common "nothing changed" case is a
string compare, not a JSON parse.

Layout: head JSON, RS, topic keys joined by US, RS, rows JSON ([readQueueNums, writeQueueNums,
perm, topicSysFlag, order] per key; a valid table's keys are its topicNames). A large topic
table may instead be a content reference (routing_lib/core/content.py) to the text
"keys RS rows": `externalize` makes that form, `inline` undoes it.
JSON text never holds a raw control character and topic names are [%|a-zA-Z0-9_-], so the
separators cannot clash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, ItemsView, Iterator, Mapping, ValuesView
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, from_json, to_json

from routing_lib.core.content import CONTENT, ContentBackend, is_ref
from routing_lib.core.topic_table import QueueData
from schemas.route_event import (
    DEFAULT_PERM,
    DEFAULT_QUEUE_NUMS,
    AdminEvent,
    ChannelClosedEvent,
    DeleteKvEvent,
    DeleteTopicEvent,
    EventDataVersion,
    HeartbeatEvent,
    PipelineRegister,
    PutKvEvent,
    RegisterEvent,
    UnregisterEvent,
    WritePermEvent,
)

Event = RegisterEvent | HeartbeatEvent | UnregisterEvent | ChannelClosedEvent | AdminEvent
_TYPES: dict[str, type[Event]] = {
    "REGISTER": RegisterEvent,
    "HEARTBEAT": HeartbeatEvent,
    "UNREGISTER": UnregisterEvent,
    "CHANNEL_CLOSED": ChannelClosedEvent,
    "WIPE_WRITE_PERM": WritePermEvent,
    "ADD_WRITE_PERM": WritePermEvent,
    "DELETE_TOPIC": DeleteTopicEvent,
    "PUT_KV": PutKvEvent,
    "DELETE_KV": DeleteKvEvent,
}
RS, US = "\x1e", "\x1f"
# a packed row's [readQueueNums, writeQueueNums, perm, topicSysFlag] (its order left out)
_QUEUE_FIELDS = itemgetter(slice(0, 4))


class TopicRow(NamedTuple):
    """A validated topic config; same attribute names as schemas.TopicConfig."""

    topicName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int
    order: bool | None


class LazyTopicTable(Mapping[str, TopicRow]):
    """topicConfigTable of a packed registration, decoded on first use. It may hold a content
    reference instead of its text, read only when a key or row is needed."""

    __slots__ = ("_keys", "_rows_json", "_decoded", "ref")

    def __init__(self, keys: str, rows_json: str | None = None):
        self.ref: str | None = None
        if rows_json is None:  # one part: a content reference
            if not is_ref(keys):
                raise ValueError("a packed topic table is keys and rows, or a reference")
            self.ref = keys
            self._keys, self._rows_json = "", ""
        else:
            self._keys, self._rows_json = keys, rows_json
        self._decoded: dict[str, TopicRow] | None = None

    def _resolve(self) -> None:
        if self.ref is not None and not self._keys and not self._rows_json:
            self._keys, _, self._rows_json = CONTENT.get(self.ref).partition(RS)

    def topic_keys(self) -> list[str]:
        self._resolve()
        return self._keys.split(US) if self._keys else []

    def _table(self) -> dict[str, TopicRow]:
        if self._decoded is None:
            self._resolve()
            rows = loads(self._rows_json)
            self._decoded = {
                k: TopicRow(k, *r) for k, r in zip(self.topic_keys(), rows, strict=True)
            }
        return self._decoded

    def queue_rows(self) -> dict[str, QueueData]:
        """Each config as the QueueData it sets (readQueueNums, writeQueueNums, perm,
        topicSysFlag) by topic name, in the table's order: built from the packed rows in C,
        without a TopicRow each (a first registration sets all 10 000)."""
        self._resolve()
        rows = map(QueueData._make, map(_QUEUE_FIELDS, loads(self._rows_json)))
        return dict(zip(self.topic_keys(), rows, strict=True))

    def __getitem__(self, key: str) -> TopicRow:
        return self._table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.topic_keys())

    def __len__(self) -> int:
        return len(self.topic_keys())

    # Mapping's mixins would call __getitem__ once per topic (applying a 10 000-topic
    # registration): the decoded dict's own views.
    def values(self) -> ValuesView[TopicRow]:
        return self._table().values()

    def items(self) -> ItemsView[str, TopicRow]:
        return self._table().items()

    def packed(self) -> str:
        """The packed form it came in: the reference, or keys RS rows."""
        if self.ref is not None:
            return self.ref
        return f"{self._keys}{RS}{self._rows_json}"


def topic_names(table: Mapping[str, Any]) -> list[str]:
    """The topicName of every config of a topicConfigTable, decoding as little as possible
    (a valid table's keys are its topicNames: contract §2)."""
    if isinstance(table, LazyTopicTable):
        return table.topic_keys()
    return list(table)


def event_json(event: Event) -> str:
    """The event as contract §2 JSON (for humans and the late-event table)."""
    record = event.model_dump(exclude={"topicConfigTable"}, exclude_none=True)
    if isinstance(event, RegisterEvent):
        record["topicConfigTable"] = {
            key: {k: v for k, v in _as_dict(config).items() if v is not None}
            for key, config in event.topicConfigTable.items()
        }
    return json.dumps(record, separators=(",", ":"))


def _as_dict(config: TopicRow | BaseModel) -> dict[str, Any]:
    return config._asdict() if isinstance(config, TopicRow) else config.model_dump()


_NO_TABLE = {"topicConfigTable"}


def _head_json(event: Event) -> str:
    """The event without its topic configs, as compact JSON (pydantic-core's serializer: an
    order of magnitude faster than model_dump + json.dumps; same fields, same order)."""
    try:
        return event.__pydantic_serializer__.to_json(
            event, exclude=_NO_TABLE, exclude_none=True
        ).decode()
    except PydanticSerializationError:  # e.g. a lone surrogate, which json.dumps escapes
        return json.dumps(
            event.model_dump(exclude=_NO_TABLE, exclude_none=True), separators=(",", ":")
        )


def pack_event(event: Event) -> str:
    head = _head_json(event)
    if not isinstance(event, RegisterEvent):
        return head
    table = event.topicConfigTable
    if isinstance(table, LazyTopicTable):
        return f"{head}{RS}{table.packed()}"
    if isinstance(event, PipelineRegister):  # validated dicts: missing fields take defaults
        return f"{head}{RS}{packed_table(event.topicConfigTable)}"
    rows = [
        [c.readQueueNums, c.writeQueueNums, c.perm, c.topicSysFlag, c.order] for c in table.values()
    ]
    # pydantic-core's encoder: several times faster than json.dumps on 10 000 rows
    return f"{head}{RS}{US.join(table)}{RS}{to_json(rows).decode()}"


def packed_table(table: Mapping[str, Mapping[str, Any]]) -> str:
    """A validated topicConfigTable of dicts (PipelineRegister's) in its packed form, keys RS
    rows, missing fields at their defaults."""
    rows = [
        [
            c.get("readQueueNums", DEFAULT_QUEUE_NUMS),
            c.get("writeQueueNums", DEFAULT_QUEUE_NUMS),
            c.get("perm", DEFAULT_PERM),
            c.get("topicSysFlag", 0),
            c.get("order"),
        ]
        for c in table.values()
    ]
    return f"{US.join(table)}{RS}{to_json(rows).decode()}"


def pack_register(head: RegisterEvent, table: str) -> str:
    """A registration packed from its validated head and its table's packed form: what
    `pack_event` gives for the registration holding both."""
    return f"{_head_json(head)}{RS}{table}"


def loads(text: str) -> Any:
    """json.loads, 3-4x faster on small objects (pydantic-core's parser); text it refuses
    (e.g. a lone surrogate escape, which json.dumps writes) goes to json.loads."""
    try:
        return from_json(text)
    except ValueError:
        return json.loads(text)


_EVENT_TYPE = re.compile(r'"eventType":"([A-Z_]+)"')


def packed_event_type(packed: str) -> str:
    """The eventType of a packed event, without decoding it. Only the head can hold the
    pattern: inside a JSON string value a quote is escaped."""
    head_end = packed.find(RS)
    match = _EVENT_TYPE.search(packed, 0, head_end if head_end >= 0 else len(packed))
    if match is None:
        raise ValueError("not a packed event: no eventType in its head")
    return match.group(1)


_Model = TypeVar("_Model", bound=BaseModel)


def _trusted_constructor(cls: type[_Model]) -> Callable[[dict[str, Any]], _Model]:
    """`cls.model_construct(**values)` for values that came from a validated model's dump,
    without its per-field bookkeeping (a third of applying a heartbeat). It sets the same
    attributes model_construct sets; tests/test_packed_pending.py checks the two agree."""
    defaults: dict[str, Any] = {}  # every field, in declaration order (model_dump's order)
    for name, info in cls.model_fields.items():
        if info.default_factory is not None:
            raise TypeError(f"{cls.__name__}.{name}: default factories are not supported here")
        defaults[name] = None if info.is_required() else info.default
    new = cls.__new__
    set_attribute = object.__setattr__

    def construct(values: dict[str, Any]) -> _Model:
        model = new(cls)
        set_attribute(model, "__pydantic_fields_set__", set(values))  # packed: only fields
        if len(values) != len(defaults):  # some fields were left out (None): fill them in
            values = {n: values.get(n, d) for n, d in defaults.items()}
        set_attribute(model, "__dict__", values)
        set_attribute(model, "__pydantic_extra__", None)
        set_attribute(model, "__pydantic_private__", None)
        return model

    return construct


_CONSTRUCTORS = {name: _trusted_constructor(cls) for name, cls in _TYPES.items()}
_data_version = _trusted_constructor(EventDataVersion)


def externalize(packed: str, backend: ContentBackend | None, min_chars: int) -> str:
    """A packed registration whose topic table text has `min_chars` or more, with the table
    replaced by its content reference (stored in `backend` first); anything else unchanged."""
    head_end = packed.find(RS)
    if head_end < 0:
        return packed
    ref = topics_ref(packed)
    if ref is not None:  # a reference already (a known record's): make it durable here
        CONTENT.ensure(ref, backend)
        return packed
    if len(packed) - head_end - 1 < min_chars:
        return packed
    return f"{packed[:head_end]}{RS}{CONTENT.put(packed[head_end + 1 :], backend)}"


def inline(packed: str) -> str:
    """A packed event with its topic table as text (for people: dead letters, late events)."""
    head_end = packed.find(RS)
    if head_end < 0 or not is_ref(packed[head_end + 1 :]):
        return packed
    return f"{packed[:head_end]}{RS}{CONTENT.get(packed[head_end + 1 :])}"


def topics_ref(packed: str) -> str | None:
    """The content reference of a packed registration's topic table, if it has one."""
    head_end = packed.find(RS)
    if head_end < 0:
        return None
    tail = packed[head_end + 1 :]
    return tail if is_ref(tail) else None


def unpack_event(packed: str) -> Event:
    head_json, *topics = packed.split(RS)
    head = loads(head_json)
    event_type = head["eventType"]
    if event_type == "REGISTER":
        head["dataVersion"] = _data_version(head["dataVersion"])
        head["topicConfigTable"] = LazyTopicTable(*topics)
    return _CONSTRUCTORS[event_type](head)
