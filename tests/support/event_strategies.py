"""Hypothesis strategies for broker-event histories (contract §2), drawn as JSON records.

Every integer field is drawn over its schema range (schemas/route_event.py), so the bounds
come up by themselves: eventTime 1 and MAX_EVENT_TIME_MS, brokerId 0 and INT64_MAX,
dataVersion fields and topicSysFlag at both ends of their Java types, heartbeat timeouts of
1 ms and INT64_MAX. Names come from small pools, so events of one history meet: a broker's
REGISTER, HEARTBEAT and UNREGISTER hit the same (cluster, address), a DELETE_TOPIC names a
registered topic, a group can be all slaves. Connections (contract §2, "Connections
(channels)") come from a small pool of two collectors' channels, each collector with an earlier
and a later incarnation (a restart), so requests add them, supersede older ones, and
CHANNEL_CLOSED events close held ones (the broker leaves with its last), close ones already
gone (stale, repeated) or name brokers that are not live.

A history is drawn in eventTime order, then given an arrival order with disorder below the
watermark delay (each event delayed by a drawn 0..delay-1, as the simulator's `with_disorder`
does with a seeded one), so no event is late, and cut into drawn micro-batch sizes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from routing_lib.core.group_routes import RouteFlags
from schemas.route_event import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    MAX_EVENT_TIME_MS,
    MAX_QUEUE_NUMS,
)

Record = dict[str, Any]

# Budgets: the test command runs "quick" (the unit tier); "long" by hand:
#   ROUTELAKE_HYPOTHESIS_PROFILE=long .venv/bin/pytest -q -p no:cacheprovider \
#       tests/test_core_properties.py
PROFILES = {
    "quick": settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    ),
    "long": settings(
        max_examples=3000,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    ),
}


def profile() -> settings:
    """The settings of the property tests: $ROUTELAKE_HYPOTHESIS_PROFILE, default "quick"."""
    return PROFILES[os.environ.get("ROUTELAKE_HYPOTHESIS_PROFILE", "quick")]


CLUSTERS = ["C1", "C2"]
BROKER_NAMES = ["broker-a", "broker-b", "broker-c"]
ADDRS = ["10.0.0.1:10911", "10.0.0.2:10911", "[::1]:65535", "h:1"]
TOPICS = ["T0", "T1", "T2", "%RETRY%g", "TBW102"]
NAMESPACES = ["ORDER_TOPIC_CONFIG", "ns"]
# Two collectors, each before and after a restart (incarnation 100 -> 300, 200 -> 400), with
# the incarnation and counter bounds, and one channel written with leading zeros (the same
# connection as collector-1@100#2).
CHANNELS = [
    "collector-1@100#1",
    "collector-1@100#2",
    "collector-1@0100#02",
    "collector-1@300#3",
    "collector-2@200#1",
    "collector-2@400#2",
    f"c@{INT64_MAX}#{INT64_MAX}",
    "c@0#0",
]


def request_channels(pool: list[str]) -> st.SearchStrategy[str | None]:
    """A request's channel: none (archives, older collectors) or one of the history's."""
    return st.one_of(st.none(), st.sampled_from(pool), st.sampled_from(pool))


int64 = st.integers(INT64_MIN, INT64_MAX)
# brokerId: 0 is the master; small ids meet each other, any id up to Java's long may come
broker_ids = st.one_of(st.sampled_from([0, 0, 1, 2]), st.integers(0, INT64_MAX))
# Small timeouts expire within a history; the whole range reaches INT64_MAX (never expires)
heartbeat_timeouts = st.one_of(
    st.none(),
    st.sampled_from([30_000, 600_000]),
    st.integers(1, 120_000),
    st.integers(1, INT64_MAX),
)


@dataclass(frozen=True)
class Member:
    """A broker process: what its REGISTER, HEARTBEAT and UNREGISTER name."""

    cluster: str
    name: str
    addr: str
    broker_id: int
    heartbeat_timeout: int | None

    def head(self, event_type: str) -> Record:
        return {
            "eventType": event_type,
            "clusterName": self.cluster,
            "brokerAddr": self.addr,
            "brokerName": self.name,
            "brokerId": self.broker_id,
        }


members = st.builds(
    Member,
    st.sampled_from(CLUSTERS),
    st.sampled_from(BROKER_NAMES),
    st.sampled_from(ADDRS),
    broker_ids,
    heartbeat_timeouts,
)

topic_configs = st.fixed_dictionaries(
    {},
    optional={
        "readQueueNums": st.integers(0, MAX_QUEUE_NUMS),
        "writeQueueNums": st.integers(0, MAX_QUEUE_NUMS),
        "perm": st.integers(0, 7),
        "topicSysFlag": st.integers(INT32_MIN, INT32_MAX),
        "order": st.one_of(st.none(), st.booleans()),
    },
)
topic_tables = st.dictionaries(st.sampled_from(TOPICS), topic_configs, max_size=len(TOPICS)).map(
    lambda table: {name: {"topicName": name, **config} for name, config in table.items()}
)
data_versions = st.fixed_dictionaries({"stateVersion": int64, "timestamp": int64, "counter": int64})


@st.composite
def register(
    draw: st.DrawFn, member: Member, versions: list[Record], channels: list[str]
) -> Record:
    record = member.head("REGISTER")
    # a few dataVersions per history, so "same dataVersion, other table" comes up
    record["dataVersion"] = dict(draw(st.sampled_from(versions)))
    record["topicConfigTable"] = draw(topic_tables)
    if member.heartbeat_timeout is not None:
        record["heartbeatTimeoutMillis"] = member.heartbeat_timeout
    optional = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "haServerAddr": st.sampled_from(ADDRS),
                "filterServerList": st.lists(st.sampled_from(ADDRS), max_size=2),
                "enableActingMaster": st.booleans(),
                "zoneName": st.sampled_from(["z1", "z2"]),
            },
        )
    )
    channel = draw(request_channels(channels))
    return {**record, **optional, **({} if channel is None else {"channel": channel})}


def admin_events() -> st.SearchStrategy[Record]:
    return st.one_of(
        st.builds(
            lambda kind, name: {"eventType": kind, "brokerName": name},
            st.sampled_from(["WIPE_WRITE_PERM", "ADD_WRITE_PERM"]),
            st.sampled_from([*BROKER_NAMES, "no-such-broker"]),
        ),
        st.builds(
            lambda topic, cluster: (
                {"eventType": "DELETE_TOPIC", "topic": topic}
                | ({} if cluster is None else {"clusterName": cluster})
            ),
            st.sampled_from([*TOPICS, "NoSuchTopic"]),
            st.sampled_from([None, "", " ", *CLUSTERS, "NoSuchCluster"]),
        ),
        st.builds(
            lambda ns, key, value: {
                "eventType": "PUT_KV",
                "namespace": ns,
                "key": key,
                "value": value,
            },
            st.sampled_from(NAMESPACES),
            st.sampled_from(["k1", "k2"]),
            st.sampled_from(["", "v", "true"]),
        ),
        st.builds(
            lambda ns, key: {"eventType": "DELETE_KV", "namespace": ns, "key": key},
            st.sampled_from(NAMESPACES),
            st.sampled_from(["k1", "k2"]),
        ),
    )


@st.composite
def untimed_event(
    draw: st.DrawFn, fleet: list[Member], versions: list[Record], channels: list[str]
) -> Record:
    kind = draw(
        st.sampled_from(
            ["REGISTER"] * 3
            + ["HEARTBEAT"] * 2
            + ["UNREGISTER", "TICK", "ADMIN"]
            + ["CHANNEL_CLOSED"] * 3
        )
    )
    if kind == "TICK":
        return {"eventType": "TICK", "source": "collector-1"}
    if kind == "ADMIN":
        return draw(admin_events())
    member = draw(st.sampled_from(fleet))
    if kind == "REGISTER":
        return draw(register(member, versions, channels))
    if kind == "CHANNEL_CLOSED":
        return {**member.head(kind), "channel": draw(st.sampled_from(channels))}
    channel = draw(request_channels(channels)) if kind == "HEARTBEAT" else None
    return member.head(kind) | ({} if channel is None else {"channel": channel})


@st.composite
def closing_used_channels(draw: st.DrawFn, untimed: list[Record]) -> list[Record]:
    """Most CHANNEL_CLOSED events name a connection their broker's requests used before, as a
    collector's do (a broker's last one closing removes it); the rest stay as drawn (stale,
    unknown)."""
    used: dict[tuple[str, str], list[str]] = {}
    out = []
    for record in untimed:
        key = (record.get("clusterName", ""), record.get("brokerAddr", ""))
        closing = record["eventType"] == "CHANNEL_CLOSED"
        if closing and used.get(key) and draw(st.sampled_from([True, True, True, False])):
            record = {**record, "channel": draw(st.sampled_from(used[key]))}
        elif "channel" in record:
            used.setdefault(key, []).append(record["channel"])
        out.append(record)
    return out


@dataclass(frozen=True)
class History:
    records: list[Record]  # in arrival order
    delay_ms: int  # the watermark delay the disorder stays below
    batch_sizes: list[int]  # the micro-batches, in arrival order
    flags: RouteFlags
    content_refs: bool

    @property
    def batches(self) -> list[list[Record]]:
        out, start = [], 0
        for size in self.batch_sizes:
            if start >= len(self.records):
                break
            out.append(self.records[start : start + size])
            start += size
        if start < len(self.records):
            out.append(self.records[start:])
        return out


@st.composite
def histories(draw: st.DrawFn, max_events: int = 30) -> History:
    # Members are drawn independently, so one (cluster, address) can come under two brokerNames
    # (a broker renamed in place): each group then keeps its own live and filter-server rows.
    fleet = draw(st.lists(members, min_size=1, max_size=5))
    versions = draw(st.lists(data_versions, min_size=1, max_size=3))
    # a few connections per history, so requests and closes meet
    channels = draw(st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=4, unique=True))
    untimed = draw(
        st.lists(untimed_event(fleet, versions, channels), min_size=1, max_size=max_events)
    )
    if draw(st.booleans()):  # and often on purpose: a member registered, then renamed
        member = draw(st.sampled_from(fleet))
        other = draw(st.sampled_from([n for n in BROKER_NAMES if n != member.name]))
        renamed = replace(member, name=other)
        fleet.append(renamed)
        first = draw(st.integers(0, len(untimed)))
        then = draw(st.integers(first, len(untimed)))
        untimed.insert(then, draw(register(renamed, versions, channels)))
        untimed.insert(first, draw(register(member, versions, channels)))
        untimed += draw(st.lists(untimed_event(fleet, versions, channels), max_size=3))
    untimed = draw(closing_used_channels(untimed))
    # mostly short gaps (brokers stay live), now and then one past a heartbeat timeout
    gap = st.one_of(
        st.just(0), st.integers(0, 5_000), st.integers(0, 5_000), st.integers(0, 300_000)
    )
    gaps = draw(st.lists(gap, min_size=len(untimed), max_size=len(untimed)))
    span = sum(gaps)
    # eventTime over the whole schema range: 1 .. MAX_EVENT_TIME_MS
    start = draw(st.integers(1, MAX_EVENT_TIME_MS - span))
    times, now = [], start
    for gap in gaps:
        now += gap
        times.append(now)
    timed = [{**record, "eventTime": t} for record, t in zip(untimed, times, strict=True)]
    # the delay the job runs with (10 s by default), its floor, and anything up to a minute
    delay = draw(st.one_of(st.sampled_from([1, 1_000, 10_000]), st.integers(1, 60_000)))
    lags = draw(st.lists(st.integers(0, delay - 1), min_size=len(timed), max_size=len(timed)))
    order = sorted(range(len(timed)), key=lambda i: (times[i] + lags[i], i))
    arrivals = [timed[i] for i in order]
    if draw(st.booleans()) and now + delay <= MAX_EVENT_TIME_MS:
        # a collector's TICK after the last event: the watermark passes every event
        arrivals.append({"eventType": "TICK", "eventTime": now + delay})
    batch_sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=len(timed)))
    flags = RouteFlags(delete_topic_with_broker_registration=draw(st.booleans()))
    return History(arrivals, delay, batch_sizes, flags, draw(st.booleans()))
