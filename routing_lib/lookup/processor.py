"""The NameServer's read-only request codes answered from a RouteIndex (pure, no I/O).

Responses follow RocketMQ 5.x ClientRequestProcessor / DefaultRequestProcessor: same codes,
same remarks, same body forms (only GET_ROUTEINFO_BY_TOPIC has the standard-JSON variant).
The NameServer's enableTopicList / enableAllTopicList are always on here: the topic lists are
never answered "disable". GET_NAMESRV_CONFIG answers the settings the lookup applies
(namesrv_config.py).
"""

from __future__ import annotations

from dataclasses import replace

from routing_lib.lookup.routes import RouteIndex, UnitFilter
from routing_lib.lookup.topics import validate_topic
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import NAMESRV_VERSION, V4_9_4, RequestCode, ResponseCode

FAQ_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"


def no_route_remark(topic: str) -> str:
    # ClientRequestProcessor + FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL)
    return (
        f"No topic route info in name server for the topic: {topic}"
        f"\nSee {FAQ_URL} for further details."
    )


def no_kv_remark(namespace: str, key: str | None = None) -> str:
    # DefaultRequestProcessor.getKVConfig / getKVListByNamespace
    remark = f"No config item, Namespace: {namespace}"
    return remark if key is None else f"{remark} Key: {key}"


def _missing(request: RemotingCommand, name: str) -> RemotingCommand:
    # What decodeCommandCustomHeader throws for a @CFNotNull field; Netty answers SYSTEM_ERROR.
    return _reply(request, ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null")


def _reply(
    request: RemotingCommand, code: int, remark: str | None = None, body: bytes = b""
) -> RemotingCommand:
    return request.response(code, remark, body, version=NAMESRV_VERSION)


def _route(index: RouteIndex, request: RemotingCommand) -> RemotingCommand:
    topic = request.ext_fields.get("topic")
    if topic is None:
        return _missing(request, "topic")
    invalid = validate_topic(topic)
    if invalid is not None:
        # The Java NameServer does not validate here (it would answer TOPIC_NOT_EXIST); a
        # topic no broker may register is refused explicitly instead.
        return _reply(request, ResponseCode.INVALID_PARAMETER, invalid)
    standard = (
        request.version >= V4_9_4
        or request.ext_fields.get("acceptStandardJsonOnly", "").lower() == "true"
    )
    body = index.route_bytes(topic, standard)
    if body is None:
        return _reply(request, ResponseCode.TOPIC_NOT_EXIST, no_route_remark(topic))
    return _reply(request, ResponseCode.SUCCESS, body=body)


def _kv_config(index: RouteIndex, request: RemotingCommand) -> RemotingCommand:
    namespace, key = request.ext_fields.get("namespace"), request.ext_fields.get("key")
    if namespace is None:
        return _missing(request, "namespace")
    if key is None:
        return _missing(request, "key")
    value = index.kv_value(namespace, key)
    if value is None:
        return _reply(request, ResponseCode.QUERY_NOT_FOUND, no_kv_remark(namespace, key))
    # GetKVConfigResponseHeader.value
    return replace(_reply(request, ResponseCode.SUCCESS), ext_fields={"value": value})


def _kv_list(index: RouteIndex, request: RemotingCommand) -> RemotingCommand:
    namespace = request.ext_fields.get("namespace")
    if namespace is None:
        return _missing(request, "namespace")
    body = index.kv_list_body(namespace)
    if body is None:
        return _reply(request, ResponseCode.QUERY_NOT_FOUND, no_kv_remark(namespace))
    return _reply(request, ResponseCode.SUCCESS, body=body.legacy)


UNIT_LISTS: dict[int, UnitFilter] = {
    RequestCode.GET_UNIT_TOPIC_LIST: UnitFilter.UNIT,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: UnitFilter.HAS_UNIT_SUB,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: UnitFilter.HAS_UNIT_SUB_UNUNIT,
}


def _broker_member_group(index: RouteIndex, request: RemotingCommand) -> RemotingCommand:
    # GetBrokerMemberGroupRequestHeader's fields are @CFNotNull, but 5.3.3's header decoder
    # logs its own "is null" refusal and goes on: a missing field is a null in the body.
    body = index.broker_member_group_body(
        request.ext_fields.get("clusterName"), request.ext_fields.get("brokerName")
    )
    # Java's handler sets the code only: the remark createResponseCommand put there stays.
    return _reply(request, ResponseCode.SUCCESS, "not set any response code", body.legacy)


def answer(index: RouteIndex | None, request: RemotingCommand) -> RemotingCommand | None:
    """The response to send, or None: nothing to send (oneway requests, stray responses)."""
    if request.is_response:
        return None  # Java looks such frames up by opaque and drops unknown ones
    response = _answer(index, request)
    return None if request.is_oneway else response


def _answer(index: RouteIndex | None, request: RemotingCommand) -> RemotingCommand:
    code = request.code
    if index is None:
        return _reply(request, ResponseCode.SYSTEM_ERROR, "name server not ready")
    if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
        return _route(index, request)
    if code == RequestCode.GET_BROKER_CLUSTER_INFO:
        return _reply(request, ResponseCode.SUCCESS, body=index.cluster_info_body.legacy)
    if code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
        return _reply(request, ResponseCode.SUCCESS, body=index.topic_list_body.legacy)
    if code == RequestCode.GET_TOPICS_BY_CLUSTER:
        cluster = request.ext_fields.get("cluster")
        if cluster is None:
            return _missing(request, "cluster")
        return _reply(
            request, ResponseCode.SUCCESS, body=index.topics_by_cluster_body(cluster).legacy
        )
    if code == RequestCode.GET_KV_CONFIG:
        return _kv_config(index, request)
    if code == RequestCode.GET_KVLIST_BY_NAMESPACE:
        return _kv_list(index, request)
    if code == RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS:
        return _reply(request, ResponseCode.SUCCESS, body=index.system_topic_list_body.legacy)
    unit_filter = UNIT_LISTS.get(code)
    if unit_filter is not None:
        body = index.unit_topic_list_body(unit_filter).legacy
        return _reply(request, ResponseCode.SUCCESS, body=body)
    if code == RequestCode.GET_NAMESRV_CONFIG:
        return _reply(request, ResponseCode.SUCCESS, body=index.settings.body())
    if code == RequestCode.GET_BROKER_MEMBER_GROUP:
        return _broker_member_group(index, request)
    return _reply(
        request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {code} not supported"
    )
