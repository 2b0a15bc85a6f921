"""Support for the registration-mode tests (tests/test_real_broker_modes.py): a tap address for
real brokers, free ports, broker configurations, and both NameServers' answers side by side.

routelake's side is what its pipeline computes from what its collector published: the events
in Kafka, replayed by the reference replay (routing_lib/core/replay.py, which the streaming job
is tested to equal) up to the latest event time the collector stamped, then answered by the
lookup's RouteIndex. The Java NameServer's side is its own GET_BROKER_CLUSTER_INFO,
GET_ALL_TOPIC_LIST and GET_ROUTEINFO_BY_TOPIC answers.
"""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routelake_dev import mqadmin
from routing_lib.core.replay import fleet_rows, replay
from routing_lib.lookup import jsonbody
from routing_lib.lookup.routes import RouteIndex
from routing_lib.read.warehouse import WarehouseSnapshot
from routing_lib.remoting.frames import (
    FrameDecoder,
    RemotingCommand,
    encode,
)
from routing_lib.remoting.protocol import BROKER_CODES, NAMESRV_VERSION, RequestCode
from schemas import parse_event
from schemas.route_event import TickEvent
from tests.support.rocketmq_support import (
    BROKER_JVM,
    BROKER_MAIN,
    NAMESRV_JVM,
    Exchange,
    JavaProcess,
    RecordingProxy,
    broker_conf,
)

# -- free ports --

# Below the kernel's ephemeral range (32768-60999), where client sockets of the same machine
# come and go, and away from tests/test_real_broker.py's fixed 29xxx ports.
PORT_RANGE = (21000, 28800)


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(*, offsets: Iterable[int] = (0,), rng: random.Random | None = None) -> int:
    """A port p with every p+offset free now (a broker needs p-2, p and p+1; its HA port p+1
    binds every interface). Random, so that tests running beside each other do not meet."""
    rng = rng or random.Random()
    offsets = tuple(offsets)
    for _ in range(200):
        port = rng.randrange(*PORT_RANGE)
        if all(_bindable(port + o, "0.0.0.0" if o == 1 else "127.0.0.1") for o in offsets):
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE}")


def free_broker_port() -> int:
    return free_port(offsets=(-2, 0, 1))


# -- the JVMs' configurations --


def namesrv_process(home: Path, port: int, **settings: object) -> JavaProcess:
    """A Java NameServer on 127.0.0.1; `settings` add NamesrvConfig keys."""
    conf = {"listenPort": port, "bindAddress": "127.0.0.1", **settings}
    return JavaProcess(
        "namesrv", mqadmin.NAMESRV_MAIN, conf, home, NAMESRV_JVM, mqadmin.NAMESRV_LOGBACK
    )


def broker_process(
    home: Path,
    port: int,
    namesrv_addrs: list[str],
    *,
    cluster: str,
    name: str,
    broker_id: int = 0,
    **settings: object,
) -> JavaProcess:
    """A 5.3.3 broker on 127.0.0.1 (../shared/notes/real-rocketmq-broker.md) registering every
    10 s (the minimum period); `settings` add or override broker.conf keys."""
    conf = {
        **broker_conf(home, port, namesrv_addrs, cluster=cluster, name=name, broker_id=broker_id),
        **settings,
    }
    return JavaProcess("broker", BROKER_MAIN, conf, home, BROKER_JVM, "rmq.broker.logback.xml")


def topic_config(name: str, read: int, write: int, perm: int = 6, order: bool = False) -> dict:
    """One entry of topics.json as TopicConfig's fastjson form."""
    return {
        "attributes": {},
        "order": order,
        "perm": perm,
        "readQueueNums": read,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": write,
    }


def write_topics_json(home: Path, topics: list[dict]) -> None:
    """Topics a broker loads at start-up: ${storePathRootDir}/config/topics.json (5.3.3's
    TopicConfigManager file, merged over the system topics it creates itself). Much faster
    than one updateTopic per topic."""
    path = home / "store" / "config" / "topics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": int(time.time() * 1000)},
        "topicConfigTable": {t["topicName"]: t for t in topics},
    }
    path.write_text(json.dumps(doc))


# -- the tap: what brokers list as routelake's address --


class RegistrationTap(RecordingProxy):
    """A NameServer address for real brokers: their registration requests (REGISTER_BROKER,
    UNREGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT) go to `target`, everything else
    (the broker's own route and member-group lookups) to `lookups` (default: `target` too),
    frame by frame. Every registration request is recorded with its answer (by opaque).

    In front of routelake's collector, `lookups` is the Java NameServer: `routectl serve
    --collect` answers those lookups from the warehouse; here the Java NameServer, fed the same
    registrations, answers them, so that what a broker does (a slave deciding to act as
    master) does not depend on which NameServer its client picked at random."""

    def __init__(self, target: int, lookups: int | None = None) -> None:
        super().__init__(target, lookups, recorded=lambda cmd: cmd.code in BROKER_CODES)


# What a NameServer's answer to a registration request tells the broker.
ANSWER_FIELDS = {
    RequestCode.REGISTER_BROKER: ("masterAddr", "haServerAddr"),
    RequestCode.QUERY_DATA_VERSION: ("changed",),
}


def answer_pairs(
    java: RegistrationTap, routelake: RegistrationTap, broker_addr: str, code: int
) -> list[tuple[Exchange, Exchange]]:
    """The broker's requests of `code` to both NameServers, paired in sending order (a broker
    sends each registration to every NameServer at once); only pairs both answered."""
    pairs = zip(java.of(broker_addr, code), routelake.of(broker_addr, code), strict=False)
    return [(j, r) for j, r in pairs if j.answer_code is not None and r.answer_code is not None]


def answer(exchange: Exchange) -> tuple:
    fields = ANSWER_FIELDS.get(exchange.code, ())
    return (exchange.answer_code, *(exchange.answer_ext.get(f) for f in fields))


# -- what each NameServer answers, for one cluster --

ROUTE_FIELDS = ("brokerDatas", "queueDatas", "filterServerTable")


@dataclass(frozen=True)
class ClusterView:
    """The answers about one cluster's broker groups: its clusterAddrTable entry, its groups'
    BrokerData, and every topic's route cut down to those groups. Java's lists come from
    HashMaps and HashSets, so lists are sorted (the documented ordering difference)."""

    cluster: list[str]
    brokers: dict[str, Any]
    routes: dict[str, Any]


def cluster_view(
    cluster: str, info: dict, routes: dict[str, dict], *, extra_groups: Iterable[str] = ()
) -> ClusterView:
    names = set(info["clusterAddrTable"].get(cluster, ())) | set(extra_groups)
    names |= {n for n, b in info["brokerAddrTable"].items() if b.get("cluster") == cluster}
    addrs = {
        a for n in names for a in info["brokerAddrTable"].get(n, {}).get("brokerAddrs", {}).values()
    }
    cut = {}
    for topic, route in routes.items():
        brokers = sorted(
            (b for b in route["brokerDatas"] if b["brokerName"] in names),
            key=lambda b: b["brokerName"],
        )
        queues = sorted(
            (q for q in route["queueDatas"] if q["brokerName"] in names),
            key=lambda q: q["brokerName"],
        )
        filters = {a: s for a, s in (route.get("filterServerTable") or {}).items() if a in addrs}
        if brokers or queues:
            cut[topic] = {
                "brokerDatas": brokers,
                "queueDatas": queues,
                "filterServerTable": filters,
            }
    return ClusterView(
        sorted(info["clusterAddrTable"].get(cluster, ())),
        {n: info["brokerAddrTable"][n] for n in sorted(names) if n in info["brokerAddrTable"]},
        cut,
    )


class NameServerClient:
    """Requests to one NameServer over one connection, one at a time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._opaque = 0

    def ask_many(self, requests: list[tuple[int, dict[str, str]]]) -> list[RemotingCommand]:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            decoder, answers = FrameDecoder(), []
            for code, ext in requests:
                self._opaque += 1
                sock.sendall(
                    encode(
                        RemotingCommand(
                            code=code, version=NAMESRV_VERSION, opaque=self._opaque, ext_fields=ext
                        )
                    )
                )
                got: list[RemotingCommand] = []
                while not got:
                    data = sock.recv(1 << 20)
                    assert data, "the NameServer closed the connection without an answer"
                    got = decoder.feed(data)
                answers.extend(got)
        return answers

    def view(self, cluster: str) -> ClusterView:
        info_answer, topics_answer = self.ask_many(
            [
                (RequestCode.GET_BROKER_CLUSTER_INFO, {}),
                (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}),
            ]
        )
        assert info_answer.code == 0 and topics_answer.code == 0, (info_answer, topics_answer)
        info = jsonbody.parse_legacy(info_answer.body)
        topics = sorted(json.loads(topics_answer.body)["topicList"])
        routes = {}
        for topic, answer in zip(
            topics,
            self.ask_many([(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}) for t in topics]),
            strict=True,
        ):
            if answer.code == 17:  # TOPIC_NOT_EXIST: listed, but no broker data
                continue
            assert answer.code == 0, (topic, answer.code, answer.remark)
            doc = jsonbody.parse_legacy(answer.body)
            routes[topic] = {k: doc.get(k) or {} for k in ROUTE_FIELDS}
        return cluster_view(cluster, info, routes)


class EventLog:
    """The collector's events in Kafka, read on as they come (one partition)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None
        )
        self.tp = TopicPartition(topic, 0)
        self.consumer.assign([self.tp])
        self.consumer.seek_to_beginning(self.tp)
        self.raw: list[dict[str, Any]] = []
        self.events: list[Any] = []

    def read(self) -> list[dict[str, Any]]:
        end = self.consumer.end_offsets([self.tp])[self.tp]
        while self.consumer.position(self.tp) < end:
            for batch in self.consumer.poll(timeout_ms=2000).values():
                for record in batch:
                    self.raw.append(json.loads(record.value))
                    self.events.append(parse_event(record.value))
        return self.raw

    def close(self) -> None:
        self.consumer.close()

    def routelake_view(
        self, cluster: str, *, support_acting_master: bool = False
    ) -> tuple[ClusterView, int]:
        """routelake's answers at the latest event time in Kafka (TICKs included), and that
        time; `support_acting_master` as `[routes] support_acting_master`."""
        self.read()
        until = max(e.eventTime for e in self.events)
        groups = replay([e for e in self.events if not isinstance(e, TickEvent)], until)
        index = RouteIndex(
            WarehouseSnapshot(fleet_rows(groups.values()), {}, until), support_acting_master
        )
        info = jsonbody.parse_legacy(index.cluster_info_body.legacy)
        routes = {}
        for topic in index.topics:
            body = index.route_body(topic)
            if body is not None:
                doc = jsonbody.parse_legacy(body.legacy)
                routes[topic] = {k: doc.get(k) or {} for k in ROUTE_FIELDS}
        return cluster_view(cluster, info, routes), until
