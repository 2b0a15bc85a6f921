"""The one definition of routelake's input event (contract §2).

`route_event` holds the pydantic models; everything else (validation, JSON Schema, the Spark
StructType in `schemas.spark`) is derived from them.
"""

from schemas.route_event import (
    AdminEvent,
    ChannelClosedEvent,
    DeleteKvEvent,
    DeleteTopicEvent,
    EventDataVersion,
    HeartbeatEvent,
    PutKvEvent,
    RegisterEvent,
    RouteEvent,
    TickEvent,
    TopicConfig,
    UnregisterEvent,
    ValidationFailure,
    WritePermEvent,
    event_json_schema,
    parse_event,
)

__all__ = [
    "AdminEvent",
    "ChannelClosedEvent",
    "DeleteKvEvent",
    "DeleteTopicEvent",
    "EventDataVersion",
    "HeartbeatEvent",
    "PutKvEvent",
    "RegisterEvent",
    "RouteEvent",
    "TickEvent",
    "TopicConfig",
    "UnregisterEvent",
    "ValidationFailure",
    "WritePermEvent",
    "event_json_schema",
    "parse_event",
]
