"""Operators' NameServer requests (mqadmin) decoded into the contract's administrative events
(docs/contract.md §2), and the allow-list that guards them.

WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327): extField brokerName;
DELETE_TOPIC_IN_NAMESRV (216): topic, clusterName optional; PUT_KV_CONFIG (100): namespace, key,
value; DELETE_KV_CONFIG (102): namespace, key. A missing required field is refused as RocketMQ's
header decoder would refuse it (SYSTEM_ERROR, "the custom field <name> is null"); PUT_KV_CONFIG
without namespace or key gets DefaultRequestProcessor's own remark. Values are published as
sent: the streaming job's validation is the one judge of a valid event.

UPDATE_NAMESRV_CONFIG (318, `mqadmin updateNamesrvConfig`): its properties body names one
setting the lookup applies (lookup/namesrv_config.py), published as a PUT_KV of that module's
namespace, so that the change is audited and reaches every lookup like the KV puts. Refused:
a key Java black-lists (NO_PERMISSION, Java's remark), a key with no meaning here, a value
other than true/false, or several keys at once (INVALID_PARAMETER; mqadmin sends one).
REGISTER_TOPIC_IN_NAMESRV (217) is refused here too (`single_topic_refusal`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from routing_lib.collector.broker_events import BrokerRequestError
from routing_lib.lookup import namesrv_config
from routing_lib.remoting.frames import RemotingCommand
from routing_lib.remoting.protocol import RequestCode, ResponseCode

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK_ONLY = ("127.0.0.0/8", "::1/128")
WRITE_PERM_CODES = frozenset(
    {RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER}
)
# The response header field that carries the topic count (Wipe/AddWritePermOfBrokerResponseHeader)
COUNT_FIELD: dict[int, str] = {
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: "wipeTopicCount",
    RequestCode.ADD_WRITE_PERM_OF_BROKER: "addTopicCount",
}


class RefusedRequest(BrokerRequestError):
    """Refused with `code` (not SYSTEM_ERROR) and this message as the remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


def single_topic_refusal(request: RemotingCommand) -> RefusedRequest:
    """What REGISTER_TOPIC_IN_NAMESRV is answered, whatever it carries: REQUEST_CODE_NOT_SUPPORTED
    saying why and what to do instead."""
    return RefusedRequest(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        "routelake: REGISTER_TOPIC_IN_NAMESRV is not taken: the route-state contract has no "
        "event for one topic's registration; the broker's next registration "
        "(registerNameServerPeriod) publishes the topic, at once with "
        "enableSingleTopicRegister=false",
    )


def no_namesrv_setting(request: RemotingCommand) -> bool:
    """An UPDATE_NAMESRV_CONFIG with nothing to change (no body, or no key in it): Java
    answers SUCCESS and changes nothing; so does the collector, publishing nothing."""
    if request.code != RequestCode.UPDATE_NAMESRV_CONFIG:
        return False
    try:
        return not namesrv_config.updates(request.body)
    except namesrv_config.ConfigRefused:
        return False  # refused by admin_event


def _namesrv_setting(request: RemotingCommand) -> dict[str, Any]:
    try:
        changes = namesrv_config.updates(request.body)
    except namesrv_config.ConfigRefused as refused:
        raise RefusedRequest(refused.code, refused.remark) from None
    if len(changes) != 1:
        raise RefusedRequest(
            ResponseCode.INVALID_PARAMETER,
            "routelake: one setting per UPDATE_NAMESRV_CONFIG (mqadmin updateNamesrvConfig "
            f"sends one), not {len(changes)}",
        )
    [(key, value)] = changes.items()
    return {
        "eventType": "PUT_KV",
        "namespace": namesrv_config.NAMESPACE,
        "key": key,
        "value": value,
    }


def _field(ext: Mapping[str, str], name: str) -> str:
    value = ext.get(name)
    if value is None:
        raise BrokerRequestError(f"the custom field <{name}> is null")
    return value


def admin_event(
    request: RemotingCommand, event_time: int, requested_by: str | None
) -> dict[str, Any]:
    """The contract event of one administrative request (BrokerRequestError: refused)."""
    ext, code = request.ext_fields, request.code
    event: dict[str, Any]
    if code in WRITE_PERM_CODES:
        kind = (
            "WIPE_WRITE_PERM" if code == RequestCode.WIPE_WRITE_PERM_OF_BROKER else "ADD_WRITE_PERM"
        )
        event = {"eventType": kind, "brokerName": _field(ext, "brokerName")}
    elif code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
        event = {"eventType": "DELETE_TOPIC", "topic": _field(ext, "topic")}
        if ext.get("clusterName") is not None:
            event["clusterName"] = ext["clusterName"]
    elif code == RequestCode.PUT_KV_CONFIG:
        if ext.get("namespace") is None or ext.get("key") is None:
            raise BrokerRequestError("namespace or key is null")
        event = {
            "eventType": "PUT_KV",
            "namespace": ext["namespace"],
            "key": ext["key"],
            "value": _field(ext, "value"),
        }
    elif code == RequestCode.UPDATE_NAMESRV_CONFIG:
        event = _namesrv_setting(request)
    elif code == RequestCode.DELETE_KV_CONFIG:
        event = {
            "eventType": "DELETE_KV",
            "namespace": _field(ext, "namespace"),
            "key": _field(ext, "key"),
        }
    else:
        raise BrokerRequestError(f"not an administrative request: {code}")
    event["eventTime"] = event_time
    if requested_by:
        event["requestedBy"] = requested_by
    return event


def event_key(event: Mapping[str, Any]) -> bytes:
    """Kafka record key: the brokerName, topic or namespace the event names."""
    name = event.get("brokerName") or event.get("topic") or event.get("namespace") or ""
    return str(name).encode()


# -- who may send them --


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """`[collector] admin_allow` entries (CIDRs or single addresses); ValueError if invalid."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise ValueError(f"[collector] admin_allow: not an address or CIDR: {cidr!r}") from None
    return tuple(networks)


def peer_host(peer: object) -> str | None:
    """The host of a socket peername ((host, port) or (host, port, flow, scope)), or None."""
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return peer[0]
    return None


def peer_text(peer: object) -> str | None:
    """`host:port` as RocketMQ logs a channel's remote address (for requestedBy)."""
    host = peer_host(peer)
    if host is None:
        return None
    port = peer[1] if isinstance(peer, tuple) and len(peer) > 1 else None
    return host if port is None else f"{host}:{port}"


def allowed(host: str | None, networks: tuple[Network, ...]) -> bool:
    if host is None:
        return False  # no address (a unix socket, a test double): never trusted
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    candidates = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)  # ::ffff:127.0.0.1 on a dual-stack socket
    return any(a in net for a in candidates for net in networks if a.version == net.version)
