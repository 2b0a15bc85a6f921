"""The broker-facing NameServer requests of RocketMQ 5.x, decoded into contract events (§2).

REGISTER_BROKER (103): RegisterBrokerRequestHeader in extFields (brokerName, brokerAddr,
clusterName, haServerAddr, brokerId required; heartbeatTimeoutMillis, enableActingMaster,
compressed, bodyCrc32 optional) and a RegisterBrokerBody: fastjson JSON
`{"topicConfigSerializeWrapper": {"dataVersion", "topicConfigTable", ...}, "filterServerList"}`
or, with compressed=true, a zlib stream of big-endian int32-length-prefixed parts: the
DataVersion JSON, a topic count then each TopicConfig in its space-separated string form
(`name read write perm filterType [attributes]`), the filter server list JSON and (brokers of
5.0.0 on) the static-topic mappings. A non-zero bodyCrc32 must equal CRC32(body) & 0x7fffffff.
UNREGISTER_BROKER (104), BROKER_HEARTBEAT (904), QUERY_DATA_VERSION (322, body: DataVersion
JSON): the broker's identity fields. The NameServer treats 322 and 904 as heartbeats.

What the Java NameServer refuses (bad crc32, an undecodable body) is a BrokerRequestError. Where
5.3.3 is lax by accident (a missing or unparsable required header field is only logged, then
fails later or registers nulls) this codec refuses too, with the remark RocketMQ's header
decoder means to give. Field values are published as the broker sent them: the streaming
job's validation (dead letters) is the one judge of a valid event.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import V5_0_0, RequestCode

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
ZONE_NAME_FIELD = "__ZONE_NAME"  # MixAll.ZONE_NAME, an extField of REGISTER_BROKER
TOPIC_FILTER_TYPES = frozenset({"SINGLE_TAG", "MULTI_TAG"})
MAX_INFLATED_BYTES = 256 * 1024 * 1024  # a compressed body may not inflate past this
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_INT = struct.Struct(">i")


class BrokerRequestError(ValueError):
    """Answered SYSTEM_ERROR with this message as the remark; nothing is published."""


def crc32(data: bytes) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF


# -- headers --


def _string(ext: Mapping[str, str], name: str, required: bool = True) -> str | None:
    value = ext.get(name)
    if value is None and required:
        raise BrokerRequestError(f"the custom field <{name}> is null")
    return value


def _number(
    ext: Mapping[str, str], name: str, bounds: tuple[int, int], required: bool = False
) -> int | None:
    """Long.parseLong / Integer.parseInt of an extField (ASCII digits, optional sign)."""
    value = _string(ext, name, required)
    if value is None:
        return None
    if not _JAVA_INT.fullmatch(value) or not bounds[0] <= int(value) <= bounds[1]:
        raise BrokerRequestError(f"the custom field <{name}> is not a number: {value[:64]!r}")
    return int(value)


def _boolean(ext: Mapping[str, str], name: str) -> bool | None:
    value = ext.get(name)
    return None if value is None else value.lower() == "true"  # Boolean.parseBoolean


@dataclass(frozen=True)
class BrokerIdentity:
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int

    def event(self, kind: str, event_time: int) -> dict[str, Any]:
        return {
            "eventType": kind,
            "eventTime": event_time,
            "clusterName": self.cluster_name,
            "brokerAddr": self.broker_addr,
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
        }


def identity(request: RemotingCommand) -> BrokerIdentity:
    """The identity fields of 104, 322 and 904 (in their headers' declaration order).

    BROKER_HEARTBEAT declares brokerId nullable; every 5.x broker sends it, and a contract
    event needs it, so it is required here too."""
    ext = request.ext_fields
    if request.code == RequestCode.BROKER_HEARTBEAT:
        cluster, addr, name = (_string(ext, f) for f in ("clusterName", "brokerAddr", "brokerName"))
    else:
        name, addr, cluster = (_string(ext, f) for f in ("brokerName", "brokerAddr", "clusterName"))
    broker_id = _number(ext, "brokerId", INT64, required=True)
    # _string and a required _number raise instead of returning None
    return BrokerIdentity(cluster, addr, name, broker_id)  # type: ignore[arg-type]


@dataclass(frozen=True)
class RegisterHeader:
    broker: BrokerIdentity
    ha_server_addr: str
    heartbeat_timeout_millis: int | None
    enable_acting_master: bool | None
    compressed: bool
    body_crc32: int
    zone_name: str | None


def register_header(request: RemotingCommand) -> RegisterHeader:
    ext = request.ext_fields
    name, addr, cluster, ha = (
        _string(ext, f) for f in ("brokerName", "brokerAddr", "clusterName", "haServerAddr")
    )
    broker_id = _number(ext, "brokerId", INT64, required=True)
    return RegisterHeader(
        # _string and a required _number raise instead of returning None
        broker=BrokerIdentity(cluster, addr, name, broker_id),  # type: ignore[arg-type]
        ha_server_addr=ha,  # type: ignore[arg-type]
        heartbeat_timeout_millis=_number(ext, "heartbeatTimeoutMillis", INT64),
        enable_acting_master=_boolean(ext, "enableActingMaster"),
        compressed=bool(_boolean(ext, "compressed")),
        body_crc32=_number(ext, "bodyCrc32", INT32) or 0,
        zone_name=ext.get(ZONE_NAME_FIELD),
    )


# -- bodies --


@dataclass(frozen=True)
class RegisterBody:
    data_version: dict[str, Any]
    topic_config_table: dict[str, Any]
    filter_server_list: list[Any] | None  # None: leave the broker's filter servers as they are


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BrokerRequestError(
            f"Failed to decode RegisterBrokerBody: {what} is not JSON"
        ) from None


def data_version(value: Any) -> dict[str, Any]:
    """DataVersion JSON -> the event's {stateVersion, timestamp, counter} (missing parts 0)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise BrokerRequestError(
            "Failed to decode RegisterBrokerBody: dataVersion is not an object"
        )
    return {k: value.get(k, 0) for k in ("stateVersion", "timestamp", "counter")}


_TOPIC_FIELDS = ("topicName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order")


def _json_body(body: bytes) -> RegisterBody:
    doc = _json(body, "the body")
    if not isinstance(doc, dict):
        raise BrokerRequestError("Failed to decode RegisterBrokerBody: not a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper") or {}
    if not isinstance(wrapper, dict):
        raise BrokerRequestError(
            "Failed to decode RegisterBrokerBody: bad topicConfigSerializeWrapper"
        )
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise BrokerRequestError("Failed to decode RegisterBrokerBody: bad topicConfigTable")
    topics = {
        key: {f: config[f] for f in _TOPIC_FIELDS if config.get(f) is not None}
        for key, config in table.items()
    }
    # Absent: the field's initial value (an empty list); an explicit null stays null.
    servers = doc.get("filterServerList", [])
    if servers is not None and not isinstance(servers, list):
        raise BrokerRequestError("Failed to decode RegisterBrokerBody: bad filterServerList")
    return RegisterBody(data_version(wrapper.get("dataVersion")), topics, servers)


class _Reader:
    """Java's readInt/readBytes over the inflated stream: short data is an error."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.data):
            raise BrokerRequestError(
                "Failed to decode RegisterBrokerBody: End of compressed data has reached"
            )
        self.pos += length
        return self.data[self.pos - length : self.pos]

    def int(self) -> int:
        value: int = _INT.unpack(self.take(4))[0]
        return value

    def part(self) -> bytes:
        return self.take(self.int())


def _java_int(text: str) -> int:
    if not _JAVA_INT.fullmatch(text) or not INT32[0] <= int(text) <= INT32[1]:
        raise BrokerRequestError(f"Failed to decode RegisterBrokerBody: bad number {text[:32]!r}")
    return int(text)


def topic_config_from_string(text: str) -> dict[str, Any]:
    """TopicConfig.decode: `name read write perm filterType[ attributesJson]` (split on " ",
    trailing empty parts dropped). topicSysFlag and order are not in this form: 0 and false."""
    parts = text.split(" ")
    while parts and parts[-1] == "":
        parts.pop()
    if len(parts) < 5 or parts[4] not in TOPIC_FILTER_TYPES:
        raise BrokerRequestError(
            f"Failed to decode RegisterBrokerBody: bad topic config {text[:64]!r}"
        )
    return {
        "topicName": parts[0],
        "readQueueNums": _java_int(parts[1]),
        "writeQueueNums": _java_int(parts[2]),
        "perm": _java_int(parts[3]),
        "topicSysFlag": 0,
        "order": False,
    }


def _inflate(body: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BrokerRequestError(f"Failed to decode RegisterBrokerBody: {exc}") from None
    if len(data) > limit:
        raise BrokerRequestError(
            f"Failed to decode RegisterBrokerBody: inflates past {limit} bytes"
        )
    return data  # a truncated stream gives what it has: the reader then finds it short


def _compressed_body(body: bytes, version: int, limit: int) -> RegisterBody:
    reader = _Reader(_inflate(body, limit))
    version_json = _json(reader.part(), "dataVersion")
    topics: dict[str, Any] = {}
    for _ in range(max(0, reader.int())):
        config = topic_config_from_string(_text(reader.part()))
        topics[config["topicName"]] = config
    try:
        servers = json.loads(_text(reader.part()))
    except ValueError:
        servers = []  # Java logs the unparsable list and goes on with an empty one
    if servers is not None and not isinstance(servers, list):
        servers = []
    if version >= V5_0_0:
        for _ in range(max(0, reader.int())):
            reader.part()  # static-topic mappings: not modelled (contract §3), but read
    return RegisterBody(data_version(version_json), topics, servers)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")  # Java's new String(bytes, UTF-8) replaces too


def register_body(
    body: bytes, compressed: bool, version: int, max_inflated_bytes: int = MAX_INFLATED_BYTES
) -> RegisterBody:
    if not body:  # no body: DataVersion 0/0/0, no topics, the initial (empty) filter list
        return RegisterBody(data_version({}), {}, [])
    if compressed:
        return _compressed_body(body, version, max_inflated_bytes)
    return _json_body(body)


# -- events --


def register_event(
    request: RemotingCommand, event_time: int, max_inflated_bytes: int = MAX_INFLATED_BYTES
) -> tuple[RegisterHeader, dict[str, Any]]:
    """(header, REGISTER event) of a REGISTER_BROKER request; crc32 checked first."""
    header = register_header(request)
    if header.body_crc32 != 0 and crc32(request.body) != header.body_crc32:
        raise BrokerRequestError("crc32 not match")
    body = register_body(request.body, header.compressed, request.version, max_inflated_bytes)
    event = header.broker.event("REGISTER", event_time)
    event.update(
        haServerAddr=header.ha_server_addr,
        dataVersion=body.data_version,
        topicConfigTable=body.topic_config_table,
    )
    optional = {
        "filterServerList": body.filter_server_list,
        "heartbeatTimeoutMillis": header.heartbeat_timeout_millis,
        "enableActingMaster": header.enable_acting_master,
        "zoneName": header.zone_name,
    }
    event.update((k, v) for k, v in optional.items() if v is not None)
    return header, event


def query_data_version(request: RemotingCommand) -> dict[str, Any]:
    """The DataVersion a QUERY_DATA_VERSION carries (its body)."""
    return data_version(_json(request.body, "dataVersion") if request.body else {})


def tick_event(event_time: int, source: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {"eventType": "TICK", "eventTime": event_time}
    if source:
        event["source"] = source
    return event


def encode_event(event: Mapping[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")
