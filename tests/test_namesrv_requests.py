"""The rest of the NameServer's request surface: the unit-flag topic lists (311/312/313), the
broker member group (901), the name server's settings (GET 319 / UPDATE 318) and the refused
one-topic registration (217). Pure tests of the processor, the settings module and the
collector's decoding; then the collector on the wire against the real local Kafka."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from routing_lib.collector.admin_events import (
    RefusedRequest,
    admin_event,
    no_namesrv_setting,
    single_topic_refusal,
)
from routing_lib.core.catalog import KV_CONFIG, TOPIC_QUEUE
from routing_lib.lookup import namesrv_config
from routing_lib.lookup.namesrv_config import ConfigRefused, parse_properties, updates
from routing_lib.lookup.processor import answer
from routing_lib.lookup.routes import RouteIndex, first_in_java_hashmap
from routing_lib.read.warehouse import WarehouseSnapshot
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import (
    ADMIN_CODES,
    BROKER_CODES,
    NAMESRV_VERSION,
    READ_CODES,
    RequestCode,
    ResponseCode,
)
from schemas import parse_event
from tests.support.lookup_support import VERSIONS, queue, tables
from tests.support.rocketmq_support import CollectorThread, call, events

DEFAULT_CONFIG = (
    b"enableAllTopicList=true\nenableTopicList=true\n"
    b"orderMessageEnable=false\nsupportActingMaster=false\n"
)


def request(code: int, body: bytes = b"", **ext: str) -> RemotingCommand:
    return RemotingCommand(code=code, version=NAMESRV_VERSION, opaque=5, ext_fields=ext, body=body)


def index_of(extra_queues=(), kv=(), **options) -> RouteIndex:
    rows = tables()
    rows[TOPIC_QUEUE] = [*rows[TOPIC_QUEUE], *extra_queues]
    rows[KV_CONFIG] = [{"namespace": ns, "key": k, "value": v} for ns, k, v in kv]
    return RouteIndex(WarehouseSnapshot(rows, dict(VERSIONS), 1_764_000_050_000), **options)


def topic_list(response: RemotingCommand) -> list[str]:
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, None)
    return json.loads(response.body)["topicList"]


# -- 311 / 312 / 313: topic lists by the unit bits of topicSysFlag --


UNIT_QUEUES = [
    queue("UnitOnly", "broker-a", 4, sys_flag=1),
    queue("UnitSubOnly", "broker-a", 4, sys_flag=2),
    queue("UnitAndSub", "broker-b", 4, sys_flag=3),
    queue("OtherBits", "broker-b", 4, sys_flag=4),  # no unit bit: in none of the lists
    queue("UnitNoBroker", "broker-gone", 1, sys_flag=1),  # listed though not routable
    # Flags differ per broker: Java reads the queue data its HashMap iterates first, and a
    # HashMap of broker-a, broker-b, broker-c iterates broker-b first (Java 17, jshell).
    queue("Mixed", "broker-a", 4, sys_flag=0),
    queue("Mixed", "broker-b", 4, sys_flag=1),
    queue("Mixed", "broker-c", 4, sys_flag=2),
]


def test_unit_topic_lists():
    index = index_of(UNIT_QUEUES)
    lists = {
        code: topic_list(answer(index, request(code)))
        for code in (
            RequestCode.GET_UNIT_TOPIC_LIST,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        )
    }
    assert lists == {
        RequestCode.GET_UNIT_TOPIC_LIST: ["Mixed", "UnitAndSub", "UnitNoBroker", "UnitOnly"],
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: ["UnitAndSub", "UnitSubOnly"],
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: ["UnitSubOnly"],
    }
    # The body is TopicList as RemotingSerializable encodes it (no brokerAddr when null).
    body = answer(index, request(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST)).body
    assert body == b'{"topicList":["UnitSubOnly"]}'
    # No unit topic at all: an empty list, not an error; any extra field is ignored.
    empty = answer(index_of(), request(RequestCode.GET_UNIT_TOPIC_LIST, topic="x"))
    assert empty.body == b'{"topicList":[]}'


@pytest.mark.parametrize(
    ("names", "first"),
    [  # what Java 17's HashMap<String, _> iterates first, asked of jshell
        (("broker-a", "broker-b", "broker-c"), "broker-b"),
        (("broker-0", "broker-1", "broker-2", "broker-3"), "broker-2"),
        (tuple(f"b-{i:02d}" for i in range(13)), "b-02"),  # 13 keys: 32 buckets
        (("alpha", "mid", "zeta"), "zeta"),
    ],
)
def test_first_queue_data_as_a_java_hashmap_iterates(names, first):
    assert names[first_in_java_hashmap(names)] == first


def test_unit_lists_follow_a_new_snapshot():
    index = index_of(UNIT_QUEUES)
    assert "UnitOnly" in topic_list(answer(index, request(RequestCode.GET_UNIT_TOPIC_LIST)))
    flags_cleared = [{**q, "topic_sys_flag": 0} for q in UNIT_QUEUES]
    later = RouteIndex.assemble(
        index_of(flags_cleared).store, {}, VERSIONS, None, previous=index, changed_topics=None
    )
    assert topic_list(answer(later, request(RequestCode.GET_UNIT_TOPIC_LIST))) == []


# -- 901: GET_BROKER_MEMBER_GROUP --


def test_broker_member_group():
    index = index_of()
    group = answer(
        index,
        request(RequestCode.GET_BROKER_MEMBER_GROUP, clusterName="ClusterB", brokerName="broker-c"),
    )
    # the remark Java's createResponseCommand(null) sets and getBrokerMemberGroup keeps
    assert (group.code, group.remark) == (ResponseCode.SUCCESS, "not set any response code")
    # GetBrokerMemberGroupResponseBody as fastjson writes it: Long keys bare, fields sorted
    assert group.body == (
        b'{"brokerMemberGroup":{"brokerAddrs":{1:"10.0.2.1:10911",2:"10.0.2.2:10911",'
        b'12:"10.0.2.12:10911"},"brokerName":"broker-c","cluster":"ClusterB"}}'
    )
    # Java looks the group up by name alone and echoes the cluster asked for.
    other = answer(
        index,
        request(
            RequestCode.GET_BROKER_MEMBER_GROUP, clusterName="Elsewhere", brokerName="broker-b"
        ),
    )
    assert json.loads(other.body.replace(b"{0:", b'{"0":')) == {
        "brokerMemberGroup": {
            "brokerAddrs": {"0": "10.0.1.1:10911"},
            "brokerName": "broker-b",
            "cluster": "Elsewhere",
        }
    }
    unknown = answer(
        index, request(RequestCode.GET_BROKER_MEMBER_GROUP, clusterName="C", brokerName="nope")
    )
    assert unknown.code == ResponseCode.SUCCESS
    assert (
        unknown.body
        == b'{"brokerMemberGroup":{"brokerAddrs":{},"brokerName":"nope","cluster":"C"}}'
    )


@pytest.mark.parametrize(
    ("ext", "group"),
    [  # 5.3.3's header decoder logs a missing @CFNotNull field and leaves it null
        (
            {"brokerName": "broker-b"},
            '{"brokerAddrs":{0:"10.0.1.1:10911"},"brokerName":"broker-b"}',
        ),
        ({"clusterName": "ClusterB"}, '{"brokerAddrs":{},"cluster":"ClusterB"}'),
        ({}, '{"brokerAddrs":{}}'),
    ],
)
def test_broker_member_group_without_a_field(ext, group):
    response = answer(index_of(), request(RequestCode.GET_BROKER_MEMBER_GROUP, **ext))
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "not set any response code")
    assert response.body == b'{"brokerMemberGroup":' + group.encode() + b"}"


# -- 319: GET_NAMESRV_CONFIG, and the settings a published update overrides --


def test_namesrv_config_is_what_the_lookup_applies():
    got = answer(index_of(), request(RequestCode.GET_NAMESRV_CONFIG))
    assert (got.code, got.remark, got.body) == (ResponseCode.SUCCESS, None, DEFAULT_CONFIG)
    configured = answer(
        index_of(order_message_enable=True, support_acting_master=True),
        request(RequestCode.GET_NAMESRV_CONFIG),
    )
    assert parse_properties(configured.body.decode("latin-1")) == {
        "enableAllTopicList": "true",
        "enableTopicList": "true",
        "orderMessageEnable": "true",
        "supportActingMaster": "true",
    }


ORDER_CONF = ("ORDER_TOPIC_CONFIG", "Orders", "broker-a:8;broker-b:4")


@pytest.mark.parametrize(
    ("configured", "published", "applied"),
    [
        (False, None, False),
        (False, "true", True),
        (False, "TRUE", True),  # Boolean.parseBoolean's case
        (True, "false", False),
        (True, "maybe", True),  # not a flag: the configured value stays
    ],
)
def test_a_published_setting_overrides_the_configured_one(configured, published, applied):
    kv = [ORDER_CONF]
    if published is not None:
        kv.append((namesrv_config.NAMESPACE, "orderMessageEnable", published))
    index = index_of(kv=kv, order_message_enable=configured)
    assert index.settings.order_message_enable is applied
    route = json.loads(index.route_body("Orders").standard)
    assert route.get("orderTopicConf") == (ORDER_CONF[2] if applied else None)
    config = parse_properties(answer(index, request(RequestCode.GET_NAMESRV_CONFIG)).body.decode())
    assert config["orderMessageEnable"] == str(applied).lower()


def test_a_published_acting_master_setting_rewrites_routes():
    # broker-c has no master and its queues of "Acting" lost the write perm (tables())
    plain = index_of()
    assert 0 not in plain.route("Acting")["brokerDatas"][0]["brokerAddrs"]
    rewritten = index_of(kv=[(namesrv_config.NAMESPACE, "supportActingMaster", "true")])
    assert rewritten.route("Acting")["brokerDatas"][0]["brokerAddrs"][0] == "10.0.2.1:10911"
    assert (
        json.loads(rewritten.route_body("Acting").standard)["brokerDatas"][0]["brokerAddrs"]["0"]
        == "10.0.2.1:10911"
    )


# -- the properties text of 318 --


def test_properties_as_java_reads_them():
    text = (
        "# a comment\n! another\n\n  spaced = value with = sign  \n"
        "colon:1\nblank separated\\\n    continued\nkey\\ with\\:escapes=\\u0041\\t\n"
        "bare\n"
    )
    assert parse_properties(text) == {
        "spaced": "value with = sign  ",
        "colon": "1",
        "blank": "separated" + "continued",
        "key with:escapes": "A\t",
        "bare": "",
    }
    with pytest.raises(ValueError, match="Malformed"):
        parse_properties("k=\\u00zz")


def test_updates():
    assert updates(b"orderMessageEnable=true\n") == {"orderMessageEnable": "true"}
    assert updates(b"supportActingMaster = FALSE") == {"supportActingMaster": "false"}
    assert updates(None) == updates(b"") == updates(b"# only a comment\n") == {}


@pytest.mark.parametrize(
    ("body", "code", "remark"),
    [
        (b"kvConfigPath=/tmp/x\n", 16, "Can not update config in black list."),
        (b"orderMessageEnable=true\nrocketmqHome=/x\n", 16, "Can not update config in black list."),
        (b"k=\\u12\n", 1, "string2Properties error"),
        (
            b"orderMessageEnable=yes\n",
            29,
            "routelake: orderMessageEnable takes true or false, not 'yes'",
        ),
        (b"listenPort=1\n", 29, "routelake: listenPort cannot be changed here: the lookup's port"),
        (
            b"clientRequestThreadPoolNums=4\n",
            29,
            "no meaning in routelake; settable: orderMessageEnable, supportActingMaster",
        ),
        (b"deleteTopicWithBrokerRegistration=true\n", 29, "streaming job's"),
    ],
)
def test_refused_updates(body, code, remark):
    with pytest.raises(ConfigRefused) as refused:
        updates(body)
    assert refused.value.code == code and remark in refused.value.remark
    # the collector refuses the request the same way, publishing nothing
    with pytest.raises(RefusedRequest) as at_collector:
        admin_event(request(RequestCode.UPDATE_NAMESRV_CONFIG, body), 1, "127.0.0.1:5")
    assert (at_collector.value.code, str(at_collector.value)) == (code, refused.value.remark)


def test_an_update_becomes_a_put_kv_event():
    event = admin_event(
        request(RequestCode.UPDATE_NAMESRV_CONFIG, b"orderMessageEnable=True\n"),
        1_764_000_000_000,
        "127.0.0.1:4242",
    )
    assert event == {
        "eventType": "PUT_KV",
        "namespace": namesrv_config.NAMESPACE,
        "key": "orderMessageEnable",
        "value": "true",
        "eventTime": 1_764_000_000_000,
        "requestedBy": "127.0.0.1:4242",
    }
    assert parse_event(json.dumps(event)).eventType == "PUT_KV"  # a valid contract event
    with pytest.raises(RefusedRequest, match="one setting per") as two:
        admin_event(
            request(
                RequestCode.UPDATE_NAMESRV_CONFIG,
                b"orderMessageEnable=true\nsupportActingMaster=true\n",
            ),
            1,
            None,
        )
    assert two.value.code == ResponseCode.INVALID_PARAMETER
    assert no_namesrv_setting(request(RequestCode.UPDATE_NAMESRV_CONFIG))
    assert no_namesrv_setting(request(RequestCode.UPDATE_NAMESRV_CONFIG, b"\n# nothing\n"))
    assert not no_namesrv_setting(request(RequestCode.UPDATE_NAMESRV_CONFIG, b"listenPort=1"))
    assert not no_namesrv_setting(request(RequestCode.PUT_KV_CONFIG))


def test_single_topic_registration_is_refused():
    for ext in ({"topic": "T"}, {}):
        refusal = single_topic_refusal(request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, **ext))
        assert refusal.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "enableSingleTopicRegister=false" in str(refusal)


# -- the collector on the wire, real Kafka --


def test_collector_publishes_settings_and_refuses_the_rest(kafka_bootstrap, topic):
    update = RequestCode.UPDATE_NAMESRV_CONFIG
    with CollectorThread(kafka_bootstrap, topic) as collector:
        port = collector.port
        applied = call(port, request(update, b"orderMessageEnable=true\n"))
        nothing = call(port, request(update))
        black = call(port, request(update, b"configStorePath=/etc/x\n"))
        meaningless = call(port, request(update, b"productEnvName=prod\n"))
        single = call(port, request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, b"{}", topic="T"))
        no_topic = call(port, request(RequestCode.REGISTER_TOPIC_IN_NAMESRV))
        refused = dict(collector.collector.metrics.refused)
    assert (applied.code, nothing.code) == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
    assert (black.code, black.remark) == (16, "Can not update config in black list.")
    assert meaningless.code == 29 and "productEnvName" in meaningless.remark
    assert single.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "REGISTER_TOPIC_IN_NAMESRV" in single.remark
    assert (no_topic.code, no_topic.remark) == (single.code, single.remark)
    assert refused == {"318": 2, "217": 2}
    [event] = events(kafka_bootstrap, topic)
    assert {k: event[k] for k in ("eventType", "namespace", "key", "value")} == {
        "eventType": "PUT_KV",
        "namespace": namesrv_config.NAMESPACE,
        "key": "orderMessageEnable",
        "value": "true",
    }
    assert event["requestedBy"].startswith("127.0.0.1:")


# -- the documented table of requests --

DOCS = Path(__file__).resolve().parents[1] / "docs" / "lookup.md"
# DefaultRequestProcessor.processRequest's cases in 5.3.3, plus ClientRequestProcessor's 105
JAVA_NAMESRV_CODES = {
    100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 217, 219, 224, 304,
    311, 312, 313, 318, 319, 322, 327, 901, 904,
}  # fmt: skip


def test_the_docs_list_every_request_the_java_nameserver_handles():
    rows = re.findall(r"^\| (\d+) \| ([A-Z_]+) \| (.+) \|$", DOCS.read_text(), re.M)
    documented = {int(code): (name, what) for code, name, what in rows}
    assert set(documented) == JAVA_NAMESRV_CODES == {code.value for code in RequestCode}
    for code, (name, what) in documented.items():
        assert RequestCode(code).name == name
        assert what.startswith("answered") or what.startswith("**refused**, because"), name
        # who answers it, as the docs say, is who does
        if "(lookup" in what:
            assert code in READ_CODES, name
        if "(collector" in what:
            assert code in ADMIN_CODES | BROKER_CODES, name
