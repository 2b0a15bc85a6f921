"""Invalid records of many kinds (contract §2), each with what its reason must mention."""

from __future__ import annotations

import json

from schemas.route_event import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, MAX_EVENT_TIME_MS

_GOOD = {
    "eventType": "REGISTER",
    "eventTime": 1764000000500,
    "clusterName": "BadCluster",
    "brokerAddr": "10.8.0.1:10911",
    "brokerName": "broker-bad",
    "brokerId": 0,
    "haServerAddr": "10.8.0.1:10912",
    "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": 1},
    "topicConfigTable": {
        "T": {
            "topicName": "T",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicSysFlag": 0,
        }
    },
}


def _with(**changes) -> bytes:
    record = json.loads(json.dumps(_GOOD))
    for key, value in changes.items():
        if value is _DROP:
            record.pop(key)
        else:
            record[key] = value
    return json.dumps(record).encode()


def _topic(**changes) -> bytes:
    config = {**_GOOD["topicConfigTable"]["T"], **changes}
    name = config["topicName"]
    return _with(topicConfigTable={name: config})


_DROP = object()

# (kind, raw bytes, a word the reason must contain)
BAD_RECORDS: list[tuple[str, bytes, str]] = [
    ("truncated JSON", _with()[:57], "not JSON"),
    ("plain text", b"hello broker", "not JSON"),
    ("JSON array", b"[1, 2]", "not a JSON object"),
    ("JSON null", b"null", "not a JSON object"),
    ("empty line", b"", "empty"),
    ("blank line", b"   ", "empty"),
    ("non-UTF-8 bytes", b'{"eventType": "REGISTER\xff\xfe"}', "UTF-8"),
    ("unknown eventType", _with(eventType="SHUTDOWN"), "SHUTDOWN"),
    ("missing eventType", _with(eventType=_DROP), "eventType"),
    ("missing eventTime", _with(eventTime=_DROP), "eventTime"),
    ("eventTime as string", _with(eventTime="1764000000500"), "eventTime"),
    ("eventTime negative", _with(eventTime=-5), "eventTime"),
    ("eventTime float", _with(eventTime=1764000000500.5), "eventTime"),
    ("eventTime boolean", _with(eventTime=True), "eventTime"),
    ("negative brokerId", _with(brokerId=-1), "brokerId"),
    ("brokerId as string", _with(brokerId="0"), "brokerId"),
    ("addr without port", _with(brokerAddr="10.8.0.1"), "brokerAddr"),
    ("addr port out of range", _with(brokerAddr="10.8.0.1:70000"), "brokerAddr"),
    ("empty clusterName", _with(clusterName=""), "clusterName"),
    ("brokerName too long", _with(brokerName="b" * 256), "brokerName"),
    ("topic name with a space", _topic(topicName="bad topic"), "topicConfigTable"),
    ("topic name too long", _topic(topicName="t" * 128), "topicConfigTable"),
    ("perm 9", _topic(perm=9), "perm"),
    ("huge queue numbers", _topic(readQueueNums=70000), "readQueueNums"),
    ("negative queue numbers", _topic(writeQueueNums=-1), "writeQueueNums"),
    ("topicConfigTable not an object", _with(topicConfigTable=[1]), "topicConfigTable"),
    ("REGISTER without topicConfigTable", _with(topicConfigTable=_DROP), "topicConfigTable"),
    ("REGISTER without dataVersion", _with(dataVersion=_DROP), "dataVersion"),
    ("dataVersion part as string", _with(dataVersion={"counter": "1"}), "counter"),
    ("filterServerList not a list", _with(filterServerList="10.0.0.1:1"), "filterServerList"),
    ("heartbeatTimeoutMillis zero", _with(heartbeatTimeoutMillis=0), "heartbeatTimeoutMillis"),
]


# ---- integer ranges: every integer field at and past its column's bounds ------------------
# (one such record once failed a whole backfill: pydantic took it, Arrow's BIGINT did not)

_NUMBER = "\x00number\x00"  # placeholder, replaced by the number's literal JSON text


def _with_number(path: tuple[str, ...], literal: str, base: dict | None = None) -> bytes:
    record = json.loads(json.dumps(base or _GOOD))
    target = record
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = _NUMBER
    return json.dumps(record).replace(json.dumps(_NUMBER), literal).encode()


_HEARTBEAT = {
    key: _GOOD[key] for key in ("eventTime", "clusterName", "brokerAddr", "brokerName", "brokerId")
} | {"eventType": "HEARTBEAT"}

# field path -> a value that fits Python (and maybe int64) but not the field's column/Java type
INTEGER_FIELDS: dict[tuple[str, ...], str] = {
    ("eventTime",): str(2**62),  # int64, but past year 9999: no calendar holds it
    ("brokerId",): str(2**63),
    ("heartbeatTimeoutMillis",): str(2**63),
    ("dataVersion", "stateVersion"): str(2**63),
    ("dataVersion", "timestamp"): str(2**63),
    ("dataVersion", "counter"): str(2**63),
    ("topicConfigTable", "T", "topicSysFlag"): str(2**31),  # INT column, Java int
    ("topicConfigTable", "T", "readQueueNums"): "65536",
    ("topicConfigTable", "T", "writeQueueNums"): "65536",
    ("topicConfigTable", "T", "perm"): "8",
}
OUT_OF_RANGE_LITERALS = {
    "2^63": str(2**63),
    "-2^63-1": str(-(2**63) - 1),
    "10^30": str(10**30),
    "exponent float": "1e3",
    "huge exponent": "1e400",
}

INTEGER_RANGE_RECORDS: list[tuple[str, bytes, str]] = (
    [
        (f"{'.'.join(path)} = {label}", _with_number(path, literal), path[-1])
        for path in INTEGER_FIELDS
        for label, literal in OUT_OF_RANGE_LITERALS.items()
    ]
    + [
        (f"{'.'.join(path)} fits Python, not its column", _with_number(path, literal), path[-1])
        for path, literal in INTEGER_FIELDS.items()
    ]
    + [
        (
            "HEARTBEAT eventTime = 10^30 (once failed a whole backfill)",
            _with_number(("eventTime",), str(10**30), _HEARTBEAT),
            "eventTime",
        ),
        (
            "HEARTBEAT brokerId = 2^63",
            _with_number(("brokerId",), str(2**63), _HEARTBEAT),
            "brokerId",
        ),
    ]
)
BAD_RECORDS += INTEGER_RANGE_RECORDS

# TICK (contract §2, "Clock ticks"): validated like any event
BAD_RECORDS += [
    ("TICK without eventTime", b'{"eventType": "TICK", "source": "c1"}', "eventTime"),
    ("TICK with eventTime 0", b'{"eventType": "TICK", "eventTime": 0}', "eventTime"),
    ("TICK with a numeric source", b'{"eventType": "TICK", "eventTime": 5, "source": 1}', "source"),
]

# contract §2: a topicConfigTable key must equal its value's topicName
BAD_RECORDS.append(
    (
        "topicConfigTable key unlike its topicName",
        _with(topicConfigTable={"T": {**_GOOD["topicConfigTable"]["T"], "topicName": "U"}}),
        "differs from",
    )
)

# administrative events (contract §2): missing/empty names, bad topic, bad KV value
_T = 1764000000500
BAD_RECORDS += [
    (
        "WIPE_WRITE_PERM without brokerName",
        json.dumps({"eventType": "WIPE_WRITE_PERM", "eventTime": _T}).encode(),
        "brokerName",
    ),
    (
        "ADD_WRITE_PERM with an empty brokerName",
        json.dumps({"eventType": "ADD_WRITE_PERM", "eventTime": _T, "brokerName": ""}).encode(),
        "brokerName",
    ),
    (
        "DELETE_TOPIC without topic",
        json.dumps({"eventType": "DELETE_TOPIC", "eventTime": _T}).encode(),
        "topic",
    ),
    (
        "DELETE_TOPIC with an empty topic",
        json.dumps({"eventType": "DELETE_TOPIC", "eventTime": _T, "topic": ""}).encode(),
        "topic",
    ),
    (
        "DELETE_TOPIC with a bad topic name",
        json.dumps({"eventType": "DELETE_TOPIC", "eventTime": _T, "topic": "a/b"}).encode(),
        "topic",
    ),
    (
        "DELETE_TOPIC with a numeric clusterName",
        json.dumps(
            {"eventType": "DELETE_TOPIC", "eventTime": _T, "topic": "T", "clusterName": 7}
        ).encode(),
        "clusterName",
    ),
    (
        "PUT_KV without namespace",
        json.dumps({"eventType": "PUT_KV", "eventTime": _T, "key": "k", "value": "v"}).encode(),
        "namespace",
    ),
    (
        "PUT_KV with an empty key",
        json.dumps(
            {"eventType": "PUT_KV", "eventTime": _T, "namespace": "n", "key": "", "value": "v"}
        ).encode(),
        "key",
    ),
    (
        "PUT_KV with a numeric value",
        json.dumps(
            {"eventType": "PUT_KV", "eventTime": _T, "namespace": "n", "key": "k", "value": 5}
        ).encode(),
        "value",
    ),
    (
        "PUT_KV without value",
        json.dumps({"eventType": "PUT_KV", "eventTime": _T, "namespace": "n", "key": "k"}).encode(),
        "value",
    ),
    (
        "PUT_KV with a value over 65 536 characters",
        json.dumps(
            {
                "eventType": "PUT_KV",
                "eventTime": _T,
                "namespace": "n",
                "key": "k",
                "value": "x" * 65_537,
            }
        ).encode(),
        "value",
    ),
    (
        "DELETE_KV with an empty namespace",
        json.dumps(
            {"eventType": "DELETE_KV", "eventTime": _T, "namespace": "", "key": "k"}
        ).encode(),
        "namespace",
    ),
    (
        "admin event without eventTime",
        json.dumps({"eventType": "DELETE_KV", "namespace": "n", "key": "k"}).encode(),
        "eventTime",
    ),
]


def extreme_register(low: bool) -> dict:
    """A valid REGISTER with every integer field at its lowest or highest accepted value."""
    int64 = INT64_MIN if low else INT64_MAX
    return {
        "eventType": "REGISTER",
        "eventTime": 1 if low else MAX_EVENT_TIME_MS,
        "clusterName": "Edge",
        "brokerAddr": "10.9.0.1:10911",
        "brokerName": "edge",
        "brokerId": 0 if low else INT64_MAX,
        "haServerAddr": None,
        "heartbeatTimeoutMillis": 1 if low else INT64_MAX,
        "dataVersion": {"stateVersion": int64, "timestamp": int64, "counter": int64},
        "topicConfigTable": {
            "Edge": {
                "topicName": "Edge",
                "readQueueNums": 0 if low else 65535,
                "writeQueueNums": 0 if low else 65535,
                "perm": 0 if low else 7,
                "topicSysFlag": INT32_MIN if low else INT32_MAX,
            }
        },
    }


# connections (contract §2, "Connections (channels)"): a channel not of the form
# COLLECTOR@INCARNATION#N on a REGISTER or HEARTBEAT, and a CHANNEL_CLOSED missing a field
BAD_CHANNELS: dict[str, object] = {
    "empty": "",
    "without '@'": "collector-1#3",
    "without '#'": "collector-1@100",
    "'#' in the collector id": "coll#ector@100#3",
    "'@' in the collector id": "coll@ector@100#3",
    "whitespace in the collector id": "collector 1@100#3",
    "a tab in the collector id": "collector\t1@100#3",
    "a trailing newline": "collector-1@100#3\n",
    "a 129-character collector id": "c" * 129 + "@100#3",
    "an empty collector id": "@100#3",
    "a negative incarnation": "collector-1@-100#3",
    "a negative counter": "collector-1@100#-3",
    "incarnation 2^63": f"collector-1@{2**63}#3",
    "counter 2^63": f"collector-1@100#{2**63}",
    "a 5 000-digit counter": "collector-1@100#" + "9" * 5000,
    "a non-ASCII digit": "collector-1@\u0661\u0660\u0660#3",
    "a signed incarnation": "collector-1@+100#3",
    "a number": 100,
    "a list": ["collector-1@100#3"],
    "an object": {"collector": "collector-1"},
    "a boolean": True,
}
_CLOSED = _HEARTBEAT | {"eventType": "CHANNEL_CLOSED", "channel": "collector-1@100#3"}
BAD_RECORDS += [
    (f"{event_type} channel: {label}", json.dumps(base | {"channel": value}).encode(), "channel")
    for event_type, base in (("REGISTER", _GOOD), ("HEARTBEAT", _HEARTBEAT))
    for label, value in BAD_CHANNELS.items()
]
BAD_RECORDS += [
    ("CHANNEL_CLOSED channel: null", json.dumps(_CLOSED | {"channel": None}).encode(), "channel"),
    *(
        (
            f"CHANNEL_CLOSED channel: {label}",
            json.dumps(_CLOSED | {"channel": value}).encode(),
            "channel",
        )
        for label, value in BAD_CHANNELS.items()
    ),
    *(
        (
            f"CHANNEL_CLOSED without {field}",
            json.dumps({k: v for k, v in _CLOSED.items() if k != field}).encode(),
            field,
        )
        for field in _CLOSED
        if field != "eventType"  # without it: "eventType: missing", already a kind above
    ),
]
