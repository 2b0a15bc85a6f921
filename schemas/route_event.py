"""Pydantic models of the broker events and the validation rules of contract §2.

Types are strict: JSON `1.0` or `"1"` is not an int and `true` is not an int either, because a
collector that sends those has a bug we want to see in the dead-letter table, not coerce away.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple, NotRequired

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from typing_extensions import TypedDict

# RocketMQ's TopicValidator: characters and length of a topic name.
TOPIC_NAME_PATTERN = r"^[%|a-zA-Z0-9_-]+$"
TOPIC_NAME_MAX_LENGTH = 127
NAME_MAX_LENGTH = 255
# host:port, with an IPv6 host in brackets; the port's range is checked below.
ADDR_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):([0-9]{1,5})$"
MAX_QUEUE_NUMS = 65535
DEFAULT_QUEUE_NUMS = 16
DEFAULT_PERM = 6
DEFAULT_HEARTBEAT_TIMEOUT_MILLIS = 120_000
# Integer ranges: Java's long and int (RocketMQ's field types; Delta BIGINT and INT columns).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# The last millisecond of year 9999 (UTC): the latest time Python's datetime (history's
# event_date) and Spark's timestamp_millis (the watermark) both represent. Later eventTimes are
# no real clock's reading, and they would crash those conversions, so they are dead letters.
MAX_EVENT_TIME_MS = 253_402_300_799_999

TopicName = Annotated[
    StrictStr, Field(min_length=1, max_length=TOPIC_NAME_MAX_LENGTH, pattern=TOPIC_NAME_PATTERN)
]
GroupName = Annotated[StrictStr, Field(min_length=1, max_length=NAME_MAX_LENGTH)]
QueueNums = Annotated[StrictInt, Field(ge=0, le=MAX_QUEUE_NUMS)]
Perm = Annotated[StrictInt, Field(ge=0, le=7)]
BrokerAddr = Annotated[StrictStr, Field(pattern=ADDR_PATTERN, max_length=NAME_MAX_LENGTH)]
EpochMillis = Annotated[StrictInt, Field(gt=0, le=MAX_EVENT_TIME_MS)]
Int64 = Annotated[StrictInt, Field(ge=INT64_MIN, le=INT64_MAX)]
Int32 = Annotated[StrictInt, Field(ge=INT32_MIN, le=INT32_MAX)]

# A collector's connection (contract §2, "Connections (channels)"): COLLECTOR@INCARNATION#N,
# the collector id 1-128 characters without '@', '#' or whitespace, the incarnation and the
# counter non-negative ints below 2^63 (ASCII digits: str.isdigit would take other scripts').
CHANNEL_COLLECTOR_MAX_LENGTH = 128
_CHANNEL_PATTERN = re.compile(rf"([^@#\s]{{1,{CHANNEL_COLLECTOR_MAX_LENGTH}}})@([0-9]+)#([0-9]+)")


class ChannelId(NamedTuple):
    """A parsed channel: incarnations compare as numbers, not as text."""

    collector: str
    incarnation: int
    counter: int

    def text(self) -> str:
        """The canonical form (no leading zeros): the one a channel set holds."""
        return f"{self.collector}@{self.incarnation}#{self.counter}"


def parse_channel(text: str) -> ChannelId:
    """The parts of a channel string; ValueError (with the rule it breaks) if it is invalid."""
    match = _CHANNEL_PATTERN.fullmatch(text)
    if match is None:
        raise ValueError(
            "not COLLECTOR@INCARNATION#N (collector id 1-128 characters without '@', '#' or "
            "whitespace; incarnation and counter non-negative integers)"
        )
    collector, incarnation, counter = match.groups()
    for part, value in (("incarnation", incarnation), ("counter", counter)):
        if len(value.lstrip("0")) > 19 or int(value) > INT64_MAX:  # int() of 5 000 digits raises
            raise ValueError(f"{part} {_clip(value)} is not below 2^63")
    return ChannelId(collector, int(incarnation), int(counter))


@lru_cache(maxsize=65_536)
def _canonical_channel(text: str) -> str:
    # "c@0100#1" and "c@100#1" name one connection: the state compares channels as text.
    # Cached: a connection carries a broker's every heartbeat (parsing it each time doubled a
    # heartbeat's validation); an invalid one raises, which is not cached.
    return parse_channel(text).text()


Channel = Annotated[
    StrictStr,
    AfterValidator(_canonical_channel),
    # for `routectl schema` readers; the validator above is the rule (and bounds the numbers)
    Field(
        json_schema_extra={
            "pattern": f"^{_CHANNEL_PATTERN.pattern}$",
            "description": "COLLECTOR@INCARNATION#N: the collector's connection",
        }
    ),
]


class _Model(BaseModel):
    # Extra fields are ignored (contract: HEARTBEAT and UNREGISTER ignore extra fields).
    model_config = ConfigDict(extra="ignore", frozen=True)


class EventDataVersion(_Model):
    """An event's dataVersion as brokers send it (camelCase JSON), validated; the state
    machine keeps it as routing_lib.core.group_routes.DataVersion."""

    stateVersion: Int64 = 0
    timestamp: Int64 = 0
    counter: Int64 = 0


class TopicConfig(_Model):
    topicName: TopicName
    readQueueNums: QueueNums = DEFAULT_QUEUE_NUMS
    writeQueueNums: QueueNums = DEFAULT_QUEUE_NUMS
    perm: Perm = DEFAULT_PERM
    topicSysFlag: Int32 = 0
    order: StrictBool | None = None


class _BrokerEvent(_Model):
    eventTime: EpochMillis
    clusterName: GroupName
    brokerAddr: BrokerAddr
    brokerName: GroupName
    brokerId: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]


class RegisterEvent(_BrokerEvent):
    eventType: Literal["REGISTER"]
    channel: Channel | None = None  # the collector's connection it arrived on
    haServerAddr: StrictStr | None = None
    dataVersion: EventDataVersion
    topicConfigTable: dict[TopicName, TopicConfig]
    filterServerList: list[StrictStr] | None = None
    heartbeatTimeoutMillis: Annotated[StrictInt, Field(gt=0, le=INT64_MAX)] | None = None
    enableActingMaster: StrictBool | None = None
    zoneName: StrictStr | None = None

    @model_validator(mode="after")
    def _keys_are_topic_names(self) -> RegisterEvent:
        # RocketMQ keys topicConfigTable by topicName; a differing key is a broken collector.
        for key, config in self.topicConfigTable.items():
            name = config["topicName"] if isinstance(config, dict) else config.topicName
            if key != name:
                raise ValueError(
                    f"topicConfigTable key {_clip(key)} differs from its topicName {_clip(name)}"
                )
        return self


def _clip(text: str, limit: int = 64) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"


class HeartbeatEvent(_BrokerEvent):
    eventType: Literal["HEARTBEAT"]
    channel: Channel | None = None


class ChannelClosedEvent(_BrokerEvent):
    """A collector's connection that carried this broker's requests closed, failed or stayed
    idle (contract §2, "Connections (channels)"): every field is required."""

    eventType: Literal["CHANNEL_CLOSED"]
    channel: Channel


class UnregisterEvent(_BrokerEvent):
    eventType: Literal["UNREGISTER"]


class TickEvent(_Model):
    """A collector's clock tick: it only moves the watermark (contract §2, "Clock ticks")."""

    eventType: Literal["TICK"]
    eventTime: EpochMillis
    source: StrictStr | None = None


# ---- administrative events (contract §2): an operator's change, published by a collector ----

KV_VALUE_MAX_LENGTH = 65_536
NonEmpty = Annotated[StrictStr, Field(min_length=1)]


class _AdminEvent(_Model):
    eventTime: EpochMillis
    requestedBy: StrictStr | None = None  # the client address, for audit


class WritePermEvent(_AdminEvent):
    """WIPE_WRITE_PERM (request 205) / ADD_WRITE_PERM (327) on every queue of a brokerName."""

    eventType: Literal["WIPE_WRITE_PERM", "ADD_WRITE_PERM"]
    brokerName: GroupName


class DeleteTopicEvent(_AdminEvent):
    """DELETE_TOPIC_IN_NAMESRV (216); a blank clusterName means every cluster, as in Java."""

    eventType: Literal["DELETE_TOPIC"]
    topic: TopicName
    clusterName: Annotated[StrictStr, Field(max_length=NAME_MAX_LENGTH)] | None = None

    @property
    def cluster(self) -> str | None:
        """The cluster to delete in, or None for everywhere (StringUtils.isNotBlank)."""
        return self.clusterName if self.clusterName and self.clusterName.strip() else None


class PutKvEvent(_AdminEvent):
    eventType: Literal["PUT_KV"]
    namespace: NonEmpty
    key: NonEmpty
    value: Annotated[StrictStr, Field(max_length=KV_VALUE_MAX_LENGTH)]


class DeleteKvEvent(_AdminEvent):
    eventType: Literal["DELETE_KV"]
    namespace: NonEmpty
    key: NonEmpty


AdminEvent = WritePermEvent | DeleteTopicEvent | PutKvEvent | DeleteKvEvent
ADMIN_EVENT_TYPES = ("WIPE_WRITE_PERM", "ADD_WRITE_PERM", "DELETE_TOPIC", "PUT_KV", "DELETE_KV")

AnyEvent = (
    RegisterEvent | HeartbeatEvent | UnregisterEvent | ChannelClosedEvent | TickEvent | AdminEvent
)
RouteEvent = Annotated[AnyEvent, Field(discriminator="eventType")]
_EVENT_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(RouteEvent)


def _typed_dict_of(model: type[BaseModel]) -> Any:
    """The model's fields and rules as a TypedDict: pydantic validates a 10 000-topic table
    into plain dicts about 3x faster than into model instances."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation
        if info.metadata:
            annotation = Annotated[(annotation, *info.metadata)]
        fields[name] = annotation if info.is_required() else NotRequired[annotation]
    # the functional form with fields computed at run time (the checker wants a literal)
    return TypedDict(f"{model.__name__}Dict", fields)  # type: ignore[operator]


if TYPE_CHECKING:  # built at run time: to the checker, a plain dict
    TopicConfigDict = dict[str, Any]
else:
    TopicConfigDict = _typed_dict_of(TopicConfig)


class PipelineRegister(RegisterEvent):
    """RegisterEvent as the pipeline validates it: the same rules, topic configs left as dicts
    (missing fields absent: readers apply the defaults). Only `parse_pipeline_event` makes it."""

    # narrows the parent's field to validated dicts: an intended incompatible override
    topicConfigTable: dict[TopicName, TopicConfigDict]  # type: ignore[assignment]


_PIPELINE_ADAPTER: TypeAdapter[Any] = TypeAdapter(
    Annotated[
        PipelineRegister
        | HeartbeatEvent
        | UnregisterEvent
        | ChannelClosedEvent
        | TickEvent
        | AdminEvent,
        Field(discriminator="eventType"),
    ]
)


def parse_pipeline_event(raw: bytes | str) -> AnyEvent:
    """parse_event for the pipeline's hot path: accepts exactly what parse_event accepts
    (tests check both on every bad-record kind), and leaves a REGISTER's topic configs as
    dicts. A rejected record is re-validated by parse_event for its readable reason."""
    try:
        return _check_port(_PIPELINE_ADAPTER.validate_json(raw))
    except ValidationError:
        pass
    return parse_event(raw)  # raises ValidationFailure with the readable reason


class ValidationFailure(ValueError):
    """A record that is not a valid event; `reason` is what the dead-letter table shows."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in item["loc"]) or "<record>"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def parse_event(raw: bytes | str) -> AnyEvent:
    """Decode and validate one record (a Kafka value or an archive line).

    Raises ValidationFailure with a readable reason for anything contract §2 rejects.
    """
    try:
        # Fast path, all in pydantic-core: most records are valid.
        return _check_port(_EVENT_ADAPTER.validate_json(raw))
    except ValidationError:
        pass  # find out why, with the readable reasons below
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationFailure(f"not UTF-8: {exc}") from None
    if not raw.strip():
        raise ValidationFailure("empty record")
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValidationFailure(f"not JSON: {exc}") from None
    return validate_event(obj)


def validate_event(obj: object) -> AnyEvent:
    if not isinstance(obj, dict):
        raise ValidationFailure(f"not a JSON object but {type(obj).__name__}")
    if "eventType" not in obj:
        raise ValidationFailure("eventType: missing")
    try:
        event = _EVENT_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise ValidationFailure(_describe(exc)) from None
    return _check_port(event)


def _check_port(event: AnyEvent) -> AnyEvent:
    if not isinstance(event, _BrokerEvent):  # TICK and admin events carry no address
        return event
    port = int(event.brokerAddr.rsplit(":", 1)[1])
    if not 0 < port <= 65535:
        raise ValidationFailure(f"brokerAddr: port {port} out of range")
    return event


def event_json_schema() -> dict[str, Any]:
    """JSON Schema of one event (`routectl schema`)."""
    schema = _EVENT_ADAPTER.json_schema()
    schema["title"] = "RouteEvent"
    schema["$comment"] = "routelake broker event, contract §2; brokerAddr ports must be 1..65535"
    return schema
