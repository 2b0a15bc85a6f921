"""The NameServer settings an operator reads and changes with `mqadmin getNamesrvConfig` /
`updateNamesrvConfig` (GET_NAMESRV_CONFIG 319, UPDATE_NAMESRV_CONFIG 318), as routelake has
them.

The Java NameServer keeps NamesrvConfig and NettyServerConfig in one process's memory (and its
namesrv.properties). Here the settings that mean something to the lookup are the two of
`[routes]` that shape its answers: `orderMessageEnable` (orderTopicConf in routes) and
`supportActingMaster` (the acting-master rewrite of routes). An update is published as a
PUT_KV event of the namespace `NAMESPACE`: it goes through the collector's allow-list, lands in
the `admin_events` audit with `requestedBy`, and every lookup process and replica serving the
warehouse applies it from the published KV table, once the job published it. A value there
overrides the configuration file; deleting it (`mqadmin deleteKvConfig`) restores the file's.

Everything else of Java's NamesrvConfig has no meaning here or is not the lookup's to change
(thread pools, paths, the job's `deleteTopicWithBrokerRegistration`): updates name it in their
refusal. Bodies are Java properties text: `MixAll.properties2String` writes `key=value` lines,
the NameServer reads them with `Properties.load` (ISO-8859-1, escapes, comments).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from routing_lib.remoting.protocol import ResponseCode

NAMESPACE = "ROUTELAKE_NAMESRV_CONFIG"
ORDER_MESSAGE_ENABLE = "orderMessageEnable"
SUPPORT_ACTING_MASTER = "supportActingMaster"
SETTABLE = (ORDER_MESSAGE_ENABLE, SUPPORT_ACTING_MASTER)
# What DefaultRequestProcessor.initConfigBlackList refuses whatever the NameServer's config
BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"})
BLACK_LIST_REMARK = "Can not update config in black list."
# Keys with a counterpart here that is not changed at run time: where to change it instead.
ELSEWHERE = {
    "deleteTopicWithBrokerRegistration": "it is the streaming job's "
    "[routes] delete_topic_with_broker_registration (routectl run's configuration)",
    "listenPort": "the lookup's port is routectl serve --port",
    "bindAddress": "the lookup's address is [serve] host",
    "enableAllTopicList": "routelake always answers GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
    "enableTopicList": "routelake always answers the topic lists",
    "clusterTest": "routelake has no cluster-test mode",
    "needWaitForService": "the lookup answers once its first snapshot is loaded",
    "waitSecondsForService": "the lookup answers once its first snapshot is loaded",
}


@dataclass(frozen=True, slots=True)
class Settings:
    """What the lookup applies: the configured values, or the published overrides."""

    order_message_enable: bool
    support_acting_master: bool

    def properties(self) -> dict[str, str]:
        """GET_NAMESRV_CONFIG's keys, each with the value Java's NamesrvConfig has for the
        same behaviour (the topic lists are always served here)."""
        return {
            "enableAllTopicList": "true",
            "enableTopicList": "true",
            ORDER_MESSAGE_ENABLE: _text(self.order_message_enable),
            SUPPORT_ACTING_MASTER: _text(self.support_acting_master),
        }

    def body(self) -> bytes:
        """Configuration.getAllConfigsFormatString: `key=value\\n` sorted by key, unescaped."""
        props = self.properties()
        return "".join(f"{key}={props[key]}\n" for key in sorted(props)).encode()


def _text(flag: bool) -> str:
    return "true" if flag else "false"


def parse_flag(value: str | None) -> bool | None:
    """A published override: true/false in any case (as Boolean.parseBoolean reads true),
    None for anything else (then the configured value applies)."""
    if value is None:
        return None
    lowered = value.strip().lower()
    return True if lowered == "true" else False if lowered == "false" else None


def settings(
    overrides: Mapping[str, str], *, order_message_enable: bool, support_acting_master: bool
) -> Settings:
    """The configured values with the namespace's published overrides applied."""
    order = parse_flag(overrides.get(ORDER_MESSAGE_ENABLE))
    acting = parse_flag(overrides.get(SUPPORT_ACTING_MASTER))
    return Settings(
        order_message_enable=order_message_enable if order is None else order,
        support_acting_master=support_acting_master if acting is None else acting,
    )


class ConfigRefused(Exception):
    """An update refused as a whole: the response code and remark to answer."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def updates(body: bytes | None) -> dict[str, str]:
    """UPDATE_NAMESRV_CONFIG's body -> {key: "true"|"false"} to publish ({} for no body).
    ConfigRefused: the body is not properties text (SYSTEM_ERROR, Java's remark), it names a
    black-listed key (NO_PERMISSION, Java's remark), a key with no meaning here or a value that
    is not true/false (INVALID_PARAMETER); nothing of a refused update is applied."""
    if not body:
        return {}
    try:
        props = parse_properties(body.decode("utf-8", "replace").encode("utf-8").decode("latin-1"))
    except ValueError:
        raise ConfigRefused(ResponseCode.SYSTEM_ERROR, "string2Properties error") from None
    if BLACK_LIST & props.keys():
        raise ConfigRefused(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
    out: dict[str, str] = {}
    for key, value in props.items():
        if key not in SETTABLE:
            reason = ELSEWHERE.get(key, "it has no meaning in routelake")
            raise ConfigRefused(
                ResponseCode.INVALID_PARAMETER,
                f"routelake: {key} cannot be changed here: {reason}; "
                f"settable: {', '.join(SETTABLE)}",
            )
        flag = parse_flag(value)
        if flag is None:
            raise ConfigRefused(
                ResponseCode.INVALID_PARAMETER,
                f"routelake: {key} takes true or false, not {value!r}",
            )
        out[key] = _text(flag)
    return out


# -- java.util.Properties.load, the subset a properties text can hold --

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"


def _logical_lines(text: str) -> list[str]:
    """Natural lines joined where a line ends in an odd number of backslashes; the leading
    blanks of a continuation line are dropped; comment and blank lines are left out."""
    out: list[str] = []
    pending: str | None = None
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.lstrip(_BLANK) if pending is not None else raw
        if pending is None:
            stripped = line.lstrip(_BLANK)
            if not stripped or stripped[0] in "#!":
                continue
            line = stripped
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = (pending or "") + line[:-1]
            continue
        out.append((pending or "") + line)
        pending = None
    if pending is not None:
        out.append(pending)
    return out


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\" or i >= len(text):
            out.append(char)
            continue
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i : i + 4]
            if len(digits) < 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("Malformed \\uxxxx encoding.")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(char, char))
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Properties.load of `text` (already decoded as ISO-8859-1); ValueError as Java throws
    IllegalArgumentException for a malformed \\uxxxx escape. A later key wins."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i, escaped = 0, False
        while i < len(line):  # the key ends at an unescaped =, : or blank
            char = line[i]
            if not escaped and char in "=:" + _BLANK:
                break
            escaped = char == "\\" and not escaped
            i += 1
        key, rest = line[:i], line[i:]
        rest = rest.lstrip(_BLANK)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_BLANK)
        props[_unescape(key)] = _unescape(rest)
    return props
