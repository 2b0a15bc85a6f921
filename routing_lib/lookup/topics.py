"""RocketMQ's topic rules (TopicValidator, RocketMQ 5.x)."""

from __future__ import annotations

import re

from routing_lib.remoting.limits import clip

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
# Acting-master rewrites never touch these (RouteInfoManager.pickupTopicRouteData).
SYNC_BROKER_MEMBER_GROUP_PREFIX = SYSTEM_TOPIC_PREFIX + "SYNC_BROKER_MEMBER_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

SYSTEM_TOPIC_SET = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)

TOPIC_MAX_LENGTH = 127
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255
_LEGAL = re.compile(r"[%|a-zA-Z0-9_-]*")
# Java's String.isBlank-style test (UtilAll.isBlank uses Character.isWhitespace).
_JAVA_WHITESPACE = " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPIC_SET or topic.startswith(SYSTEM_TOPIC_PREFIX)


# Topics found valid lately: clients ask the same topics again and again, and a set lookup
# costs a tenth of the checks (a bound, not a policy: emptied when full).
_VALID: set[str] = set()
MAX_KEPT_VALID = 4096


def validate_topic(topic: str | None) -> str | None:
    """None when valid, else TopicValidator.validateTopic's remark (the topic clipped: an
    invalid one can be as long as a frame)."""
    if topic in _VALID:
        return None
    invalid = _validate(topic)
    if invalid is None and topic is not None:
        if len(_VALID) >= MAX_KEPT_VALID:
            _VALID.clear()
        _VALID.add(topic)
    return invalid


def _validate(topic: str | None) -> str | None:
    if topic is None or not topic.strip(_JAVA_WHITESPACE):
        return "The specified topic is blank."
    if not _LEGAL.fullmatch(topic):
        return (
            f"The specified topic: {clip(topic)}, contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        if len(topic) > RETRY_OR_DLQ_TOPIC_MAX_LENGTH:
            return (
                f"The specified topic is DLQ or Retry topic: {clip(topic)}, and it's "
                f"longer than topic max length: {RETRY_OR_DLQ_TOPIC_MAX_LENGTH}"
            )
    elif len(topic) > TOPIC_MAX_LENGTH:
        return (
            f"The specified topic: {clip(topic)}, is longer than topic max length: "
            f"{TOPIC_MAX_LENGTH}"
        )
    return None
