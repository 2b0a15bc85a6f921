"""Write the seed corpus tests/fuzz/corpus/<target>/ (small files, committed):
`.venv/bin/python -m tests.fuzz.make_corpus`. Seeds are valid inputs of each decoder (frames of
every request the lookup and the collector answer, golden event lines, HTTP targets) and a few
broken ones; the fuzzer mutates from there."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from routelake_dev.broker_requests import identity_request, register_request, topic_config
from routing_lib.core.content import content_ref
from routing_lib.remoting.frames import RemotingCommand, SerializeType, encode
from routing_lib.remoting.protocol import RequestCode
from tests.support.bad_records import BAD_RECORDS

CORPUS = Path(__file__).resolve().parent / "corpus"
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _read_requests() -> list[RemotingCommand]:
    asks = [
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}),
        (
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": "TopicTest", "acceptStandardJsonOnly": "true"},
        ),
        (RequestCode.GET_BROKER_CLUSTER_INFO, {}),
        (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}),
        (RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicTest"}),
        (RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}),
        (RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, {}),
    ]
    return [
        RemotingCommand(code=code, version=version, opaque=7, ext_fields=ext, serialize_type=kind)
        for code, ext in asks
        for version, kind in ((399, SerializeType.JSON), (317, SerializeType.ROCKETMQ))
    ]


def _broker_requests() -> list[RemotingCommand]:
    topics = {"Orders": topic_config("Orders", 8), "Audit": topic_config("Audit", 4, perm=4)}
    out = [
        register_request("C1", "broker-a", "10.0.0.1:10911", topics=topics),
        register_request("C1", "broker-a", "10.0.0.1:10911", topics=topics, compressed=True),
        register_request(
            "C1", "broker-b", "10.0.0.2:10911", 1, serialize_type=SerializeType.ROCKETMQ
        ),
    ]
    for code in (RequestCode.BROKER_HEARTBEAT, RequestCode.UNREGISTER_BROKER):
        out.append(identity_request(code, "C1", "broker-a", "10.0.0.1:10911"))
    out.append(
        identity_request(
            RequestCode.QUERY_DATA_VERSION,
            "C1",
            "broker-a",
            "10.0.0.1:10911",
            body=b'{"counter":1,"stateVersion":0,"timestamp":1}',
        )
    )
    admin = [
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
        (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Orders", "clusterName": "C1"}),
        (RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}),
        (RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}),
    ]
    out += [RemotingCommand(code=code, ext_fields=ext) for code, ext in admin]
    return out


def _structured(code_index: int, fields: dict[int, bytes], body: bytes = b"") -> bytes:
    """An input of the targets' structured mode (see targets._structured_request)."""
    head = b"\x00".join(bytes([key]) + value for key, value in fields.items())
    return bytes([1, code_index, 0]) + head + (b"\xff\xff" + body if body else b"")


def seeds() -> dict[str, list[bytes]]:
    reads = [b"\x00" + encode(r) for r in _read_requests()]
    brokers = [b"\x00" + encode(r) for r in _broker_requests()]
    lines = []
    for fixture in ("01_master_registers", "10_filter_servers", "16_kv_config_admin"):
        lines += (GOLDEN / fixture / "events.jsonl").read_bytes().splitlines()[:6]
    bad = [raw for _, raw, _ in BAD_RECORDS[::6]]
    table = "Orders\x1fAudit\x1e[[8,8,6,0,null],[4,4,4,0,null]]"
    return {
        "remoting_frames": [*reads[:4], *brokers[:3], reads[0] + reads[1][1:], reads[2][:20]],
        "lookup_requests": [*reads, _structured(0, {0: b"TopicTest"})],
        "collector_requests": [*brokers, _structured(0, {5: b"C1", 6: b"b", 7: b"h:1", 8: b"0"})],
        "event_json": [*lines, *bad],
        "lookup_http": [b"\x00TopicTest/route", b"\x01", b"\x02DefaultCluster/topics", b"\x03x"],
        "console_http": [b"\x00Top", b"\x011764000000000", b"\x02TopicTest", b"\x05broker-a"],
        "content_refs": [content_ref(table).encode(), table.encode(), b"\x1d" + b"0" * 32],
    }


def main() -> None:
    for target, inputs in seeds().items():
        folder = CORPUS / target
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for data in inputs:
            (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


if __name__ == "__main__":
    main()
