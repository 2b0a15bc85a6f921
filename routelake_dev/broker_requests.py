"""The broker's side of the wire: requests as a RocketMQ 5.x broker builds them (BrokerOuterAPI),
for tests and bench/collector_bench.py. Written from the formats described in
routing_lib/collector/broker_events.py."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from routing_lib.collector.broker_events import crc32
from routing_lib.remoting.frames import RemotingCommand, SerializeType
from routing_lib.remoting.protocol import V5_3_3, RequestCode

_INT = struct.Struct(">i")


def topic_config(
    name: str, queues: int = 8, perm: int = 6, sys_flag: int = 0, order: bool = False
) -> dict[str, Any]:
    """TopicConfig as fastjson writes it (getters, alphabetical)."""
    return {
        "attributes": {},
        "order": order,
        "perm": perm,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": sys_flag,
        "writeQueueNums": queues,
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def json_body(
    topics: Mapping[str, Mapping[str, Any]],
    data_version: Mapping[str, int],
    filter_servers: Sequence[str] | None = (),
) -> bytes:
    wrapper = {
        "dataVersion": dict(data_version),
        "mappingDataVersion": dict(data_version),
        "topicConfigTable": dict(topics),
        "topicQueueMappingDetailMap": {},
        "topicQueueMappingInfoMap": {},
    }
    doc: dict[str, Any] = {"topicConfigSerializeWrapper": wrapper}
    if filter_servers is not None:
        doc["filterServerList"] = list(filter_servers)
    return _dumps(doc)


def compressed_body(
    topics: Mapping[str, Mapping[str, Any]],
    data_version: Mapping[str, int],
    filter_servers: Sequence[str] = (),
) -> bytes:
    """RegisterBrokerBody.encode(true): int32-prefixed parts, deflated at level 9."""
    parts = [_dumps(dict(data_version))]
    out = [_INT.pack(len(parts[0])), parts[0], _INT.pack(len(topics))]
    for config in topics.values():
        fields = " ".join(
            str(config[k]) for k in ("topicName", "readQueueNums", "writeQueueNums", "perm")
        )
        line = f"{fields} {config.get('topicFilterType', 'SINGLE_TAG')} {{}}".encode()
        out += [_INT.pack(len(line)), line]
    servers = _dumps(list(filter_servers))
    out += [_INT.pack(len(servers)), servers, _INT.pack(0)]  # no static-topic mappings
    return zlib.compress(b"".join(out), 9)


def register_request(
    cluster: str,
    name: str,
    addr: str,
    broker_id: int = 0,
    *,
    topics: Mapping[str, Mapping[str, Any]] | None = None,
    data_version: Mapping[str, int] | None = None,
    ha_server_addr: str | None = None,
    compressed: bool = False,
    crc: bool = True,
    opaque: int = 1,
    extra: Mapping[str, str] | None = None,
    serialize_type: SerializeType = SerializeType.JSON,
    filter_servers: Sequence[str] = (),
) -> RemotingCommand:
    topics = topics or {}
    version = data_version or {"stateVersion": 0, "timestamp": 1, "counter": 1}
    body = (
        compressed_body(topics, version, filter_servers)
        if compressed
        else json_body(topics, version, filter_servers)
    )
    ext = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": cluster,
        "haServerAddr": ha_server_addr or addr,
        "brokerId": str(broker_id),
        "enableActingMaster": "false",
        "compressed": str(compressed).lower(),
        "bodyCrc32": str(crc32(body) if crc else 0),
        **(extra or {}),
    }
    return RemotingCommand(
        code=RequestCode.REGISTER_BROKER,
        version=V5_3_3,
        opaque=opaque,
        ext_fields=ext,
        body=body,
        serialize_type=serialize_type,
    )


def identity_request(
    code: int,
    cluster: str,
    name: str,
    addr: str,
    broker_id: int = 0,
    *,
    opaque: int = 1,
    body: bytes = b"",
) -> RemotingCommand:
    """UNREGISTER_BROKER, BROKER_HEARTBEAT or QUERY_DATA_VERSION (body: a DataVersion)."""
    ext = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": cluster,
        "brokerId": str(broker_id),
    }
    return RemotingCommand(code=code, version=V5_3_3, opaque=opaque, ext_fields=ext, body=body)
