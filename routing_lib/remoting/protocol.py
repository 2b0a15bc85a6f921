"""The RocketMQ remoting vocabulary both services speak: request and response codes (RocketMQ
5.3.3's RequestCode and ResponseCode, those we answer or send) and the MQVersion ordinals that
change what a request or an answer looks like."""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    # Operators' writes (mqadmin), taken by the collector
    PUT_KV_CONFIG = 100
    DELETE_KV_CONFIG = 102
    WIPE_WRITE_PERM_OF_BROKER = 205
    DELETE_TOPIC_IN_NAMESRV = 216
    ADD_WRITE_PERM_OF_BROKER = 327
    UPDATE_NAMESRV_CONFIG = 318
    # Brokers' registration and heartbeats, taken by the collector
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    QUERY_DATA_VERSION = 322
    BROKER_HEARTBEAT = 904
    # A broker's one-topic registration (enableSingleTopicRegister): refused, no contract event
    REGISTER_TOPIC_IN_NAMESRV = 217
    # Clients' and operators' reads, answered by the lookup
    GET_KV_CONFIG = 101
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    GET_NAMESRV_CONFIG = 319
    GET_BROKER_MEMBER_GROUP = 901


ADMIN_CODES = frozenset(
    {
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.UPDATE_NAMESRV_CONFIG,
    }
)
BROKER_CODES = frozenset(
    {
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.QUERY_DATA_VERSION,
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
    }
)
READ_CODES = frozenset(set(RequestCode) - ADMIN_CODES - BROKER_CODES)


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    REQUEST_CODE_NOT_SUPPORTED = 3
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    QUERY_NOT_FOUND = 22
    INVALID_PARAMETER = 29


# MQVersion.Version ordinals. Clients from V4_9_4 on get standard JSON route bodies; brokers
# from V5_0_0 on send topic-queue mappings in compressed registration bodies; V5_3_3 is what a
# NameServer started by NamesrvStartup stamps on its answers, and what a 5.3.3 broker sends.
V4_9_4 = 401
V5_0_0 = 413
V5_3_3 = 479
NAMESRV_VERSION = V5_3_3
