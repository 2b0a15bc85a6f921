"""Broker-request codec: headers, crc32, JSON and compressed RegisterBrokerBody,
including bodies encoded by RocketMQ 5.3.3's own RegisterBrokerBody (a JVM from the jars)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from routelake_dev import broker_requests, mqadmin
from routing_lib.collector.broker_events import (
    BrokerRequestError,
    crc32,
    identity,
    query_data_version,
    register_body,
    register_event,
    topic_config_from_string,
)
from routing_lib.remoting.frames import RemotingCommand, SerializeType, decode, encode
from routing_lib.remoting.protocol import RequestCode
from schemas import parse_event

DV = {"stateVersion": 3, "timestamp": 1_700_000_000_000, "counter": 7}
TOPICS = {
    "Orders": broker_requests.topic_config("Orders", 8),
    "Audit": broker_requests.topic_config("Audit", 4, perm=4, sys_flag=1, order=True),
}


def test_crc32_is_javas_masked_value():
    # java.util.zip.CRC32 of "123456789" is 0xCBF43926; UtilAll.crc32 masks the sign bit.
    assert crc32(b"123456789") == 0xCBF43926 & 0x7FFFFFFF
    assert crc32(b"") == 0


@pytest.mark.parametrize("kind", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_register_header_and_json_body_become_a_register_event(kind):
    request = broker_requests.register_request(
        "C1",
        "broker-a",
        "127.0.0.1:10911",
        0,
        topics=TOPICS,
        data_version=DV,
        ha_server_addr="127.0.0.1:10912",
        serialize_type=kind,
        filter_servers=["127.0.0.1:1"],
        extra={"heartbeatTimeoutMillis": "30000", "__ZONE_NAME": "z1"},
    )
    request = decode(encode(request))  # through the wire codec
    header, event = register_event(request, 1_764_000_000_123)
    assert header.body_crc32 == crc32(request.body) and not header.compressed
    assert event == {
        "eventType": "REGISTER",
        "eventTime": 1_764_000_000_123,
        "clusterName": "C1",
        "brokerAddr": "127.0.0.1:10911",
        "brokerName": "broker-a",
        "brokerId": 0,
        "haServerAddr": "127.0.0.1:10912",
        "dataVersion": DV,
        "topicConfigTable": {
            "Orders": {
                "topicName": "Orders",
                "readQueueNums": 8,
                "writeQueueNums": 8,
                "perm": 6,
                "topicSysFlag": 0,
                "order": False,
            },
            "Audit": {
                "topicName": "Audit",
                "readQueueNums": 4,
                "writeQueueNums": 4,
                "perm": 4,
                "topicSysFlag": 1,
                "order": True,
            },
        },
        "filterServerList": ["127.0.0.1:1"],
        "heartbeatTimeoutMillis": 30000,
        "enableActingMaster": False,
        "zoneName": "z1",
    }
    parse_event(json.dumps(event))  # a valid contract event


def test_compressed_body_loses_sys_flag_and_order_like_java():
    request = broker_requests.register_request(
        "C1", "b", "127.0.0.1:1", topics=TOPICS, data_version=DV, compressed=True
    )
    _, event = register_event(request, 5)
    assert event["dataVersion"] == DV
    assert event["topicConfigTable"]["Audit"] == {
        "topicName": "Audit",
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 4,
        "topicSysFlag": 0,
        "order": False,
    }
    assert event["filterServerList"] == []


def test_wrong_crc32_is_refused_and_zero_crc32_is_not_checked():
    request = broker_requests.register_request("C1", "b", "127.0.0.1:1", topics=TOPICS)
    bad = RemotingCommand(
        **{
            **request.__dict__,
            "ext_fields": {**request.ext_fields, "bodyCrc32": str(crc32(request.body) ^ 1)},
        }
    )
    with pytest.raises(BrokerRequestError, match="^crc32 not match$"):
        register_event(bad, 1)
    unchecked = broker_requests.register_request("C1", "b", "127.0.0.1:1", topics=TOPICS, crc=False)
    assert register_event(unchecked, 1)[1]["topicConfigTable"].keys() == TOPICS.keys()


@pytest.mark.parametrize(
    "field", ["brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId"]
)
def test_missing_required_header_field(field):
    request = broker_requests.register_request("C1", "b", "127.0.0.1:1")
    ext = {k: v for k, v in request.ext_fields.items() if k != field}
    with pytest.raises(BrokerRequestError, match=f"<{field}> is null"):
        register_event(RemotingCommand(code=103, ext_fields=ext, body=request.body), 1)


@pytest.mark.parametrize("value", ["x", "1.0", "", "99999999999999999999", "0x10"])
def test_unparsable_numbers_are_refused(value):
    request = broker_requests.register_request("C1", "b", "127.0.0.1:1")
    ext = {**request.ext_fields, "brokerId": value}
    with pytest.raises(BrokerRequestError, match="brokerId"):
        register_event(RemotingCommand(code=103, ext_fields=ext, body=request.body), 1)


def test_no_body_is_an_empty_registration():
    body = register_body(b"", compressed=False, version=479)
    assert body.data_version == {"stateVersion": 0, "timestamp": 0, "counter": 0}
    assert body.topic_config_table == {} and body.filter_server_list == []


def test_json_body_filter_server_list_absent_vs_null():
    assert register_body(b'{"topicConfigSerializeWrapper":{}}', False, 479).filter_server_list == []
    assert register_body(b'{"filterServerList":null}', False, 479).filter_server_list is None


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b"\xff\xfe",
        b'{"topicConfigSerializeWrapper":1}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"a":1}}}',
        b'{"filterServerList":"x"}',
    ],
)
def test_bad_json_bodies(body):
    with pytest.raises(BrokerRequestError, match="RegisterBrokerBody"):
        register_body(body, False, 479)


def _parts(*parts: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in parts)


@pytest.mark.parametrize(
    "raw",
    [
        b"not zlib at all",
        zlib.compress(b"\x00\x00"),  # truncated length
        zlib.compress(
            _parts(b'{"counter":1}') + struct.pack(">i", 2) + _parts(b"T 1 1 6 SINGLE_TAG")
        ),
        zlib.compress(_parts(b'{"counter":1}') + struct.pack(">i", 1) + _parts(b"T 1 1 6 NOPE")),
        zlib.compress(
            _parts(b'{"counter":1}') + struct.pack(">i", 1) + _parts(b"T x 1 6 MULTI_TAG")
        ),
        zlib.compress(_parts(b"{")),
        zlib.compress(_parts(b'{"counter":1}'))[:-6],  # truncated stream
    ],
)
def test_bad_compressed_bodies(raw):
    with pytest.raises(BrokerRequestError):
        register_body(raw, True, 479)


def test_compressed_bomb_is_bounded():
    bomb = zlib.compress(b"\x00" * (8 * 1024 * 1024), 9)
    with pytest.raises(BrokerRequestError, match="inflates past"):
        register_body(bomb, True, 479, max_inflated_bytes=1024 * 1024)


def test_compressed_old_broker_has_no_mapping_part():
    raw = zlib.compress(_parts(b'{"counter":2}') + struct.pack(">i", 0) + _parts(b"[]"))
    assert register_body(raw, True, 412).data_version["counter"] == 2
    with pytest.raises(BrokerRequestError):
        register_body(raw, True, 479)  # a 5.x broker must send the mapping count


def test_topic_config_string_form():
    assert topic_config_from_string('T 8 4 6 MULTI_TAG {"a b":"1"} ')["writeQueueNums"] == 4
    with pytest.raises(BrokerRequestError):
        topic_config_from_string("T 8 4 6")


@pytest.mark.parametrize(
    "code",
    [RequestCode.UNREGISTER_BROKER, RequestCode.BROKER_HEARTBEAT, RequestCode.QUERY_DATA_VERSION],
)
def test_identity_headers(code):
    request = broker_requests.identity_request(code, "C1", "b", "127.0.0.1:1", 2)
    assert identity(request).event("HEARTBEAT", 9) == {
        "eventType": "HEARTBEAT",
        "eventTime": 9,
        "clusterName": "C1",
        "brokerAddr": "127.0.0.1:1",
        "brokerName": "b",
        "brokerId": 2,
    }
    with pytest.raises(BrokerRequestError, match="<brokerId> is null"):
        identity(
            RemotingCommand(
                code=code,
                ext_fields={k: v for k, v in request.ext_fields.items() if k != "brokerId"},
            )
        )


def test_query_data_version_body():
    request = broker_requests.identity_request(322, "C1", "b", "a:1", body=json.dumps(DV).encode())
    assert query_data_version(request) == DV


# -- parity with RocketMQ's own encoder --

JAVA_ENCODER = r"""
import java.util.*;
import org.apache.rocketmq.common.*;
import org.apache.rocketmq.remoting.protocol.*;
import org.apache.rocketmq.remoting.protocol.body.*;

public class EncodeBodies {
    public static void main(String[] args) throws Exception {
        RegisterBrokerBody body = new RegisterBrokerBody();
        TopicConfigAndMappingSerializeWrapper w = new TopicConfigAndMappingSerializeWrapper();
        DataVersion dv = new DataVersion();
        dv.setStateVersion(3); dv.setTimestamp(1700000000000L); dv.getCounter().set(7);
        w.setDataVersion(dv);
        TopicConfig orders = new TopicConfig("Orders", 8, 8, 6);
        TopicConfig audit = new TopicConfig("Audit", 4, 2, 4);
        audit.setOrder(true); audit.setTopicSysFlag(1);
        w.getTopicConfigTable().put("Orders", orders);
        w.getTopicConfigTable().put("Audit", audit);
        body.setTopicConfigSerializeWrapper(w);
        body.setFilterServerList(Arrays.asList("127.0.0.1:30000"));
        for (boolean c : new boolean[] {false, true}) {
            byte[] bytes = body.encode(c);
            System.out.println(c + " " + UtilAll.crc32(bytes) + " "
                + Base64.getEncoder().encodeToString(bytes));
        }
    }
}
"""


@pytest.fixture(scope="module")
def java_bodies(tmp_path_factory) -> dict[bool, tuple[int, bytes]]:
    reason = mqadmin.missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    root: Path = tmp_path_factory.mktemp("java-bodies")
    source = root / "EncodeBodies.java"
    source.write_text(JAVA_ENCODER)
    done = subprocess.run(
        [
            "java",
            "-Xmx128m",
            f"-Duser.home={root}",
            "-cp",
            str(mqadmin.jars_dir() / "*"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import base64

    out = {}
    for line in done.stdout.split("\n"):
        if line.startswith(("true ", "false ")):
            flag, crc, data = line.split(" ")
            out[flag == "true"] = (int(crc), base64.b64decode(data))
    return out


@pytest.mark.parametrize("compressed", [False, True])
def test_bodies_encoded_by_rocketmq_itself(java_bodies, compressed):
    crc, body = java_bodies[compressed]
    assert crc32(body) == crc
    request = broker_requests.register_request("C1", "b", "127.0.0.1:1")
    ext = {**request.ext_fields, "compressed": str(compressed).lower(), "bodyCrc32": str(crc)}
    _, event = register_event(RemotingCommand(code=103, version=479, ext_fields=ext, body=body), 1)
    assert event["dataVersion"] == DV
    assert event["filterServerList"] == ["127.0.0.1:30000"]
    audit = event["topicConfigTable"]["Audit"]
    assert (audit["readQueueNums"], audit["writeQueueNums"], audit["perm"]) == (4, 2, 4)
    # The compressed form has no topicSysFlag/order (TopicConfig.encode): Java loses them too.
    assert (audit["topicSysFlag"], audit["order"]) == ((0, False) if compressed else (1, True))
    assert event["topicConfigTable"]["Orders"]["readQueueNums"] == 8
    parse_event(json.dumps(event))
