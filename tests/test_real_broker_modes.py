"""Every registration mode of a real RocketMQ 5.3.3 broker, in tap mode: each broker lists the
Java NameServer and routelake's collector (each behind a recording tap), and routelake's routes
(collector -> Kafka -> the reference replay -> the lookup's RouteIndex) must equal the Java
NameServer's answers (GET_BROKER_CLUSTER_INFO, GET_ROUTEINFO_BY_TOPIC for every topic), cut
down to the case's cluster; so must what brokers read from the registration answers:

- forceRegister=false: the broker asks QUERY_DATA_VERSION and skips unchanged registrations;
- enableSplitRegistration with splitRegistrationSize=3 and 300 topics;
- a master and a slave of one group (enableSlaveActingMaster), then the master killed;
- a broker whose topics change while another NameServer of its namesrvAddr list is down.

Last, the streaming job reads every case's events and must publish the replay's tables.
One Java NameServer, one collector and one Kafka topic serve every case; every case's brokers
start together (JVM start-ups overlap). Ports are picked at run time. docs/real-broker-modes.md
says what differs from the Java NameServer and why.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from routelake_dev import kafka_local, mqadmin
from routing_lib.core.dump import project
from routing_lib.core.replay import default_watermark, replay_dump
from routing_lib.read.warehouse import load_snapshot
from tests.support.broker_modes_support import (
    ClusterView,
    EventLog,
    NameServerClient,
    RegistrationTap,
    answer,
    answer_pairs,
    broker_process,
    free_broker_port,
    free_port,
    namesrv_process,
    topic_config,
    write_topics_json,
)
from tests.support.rocketmq_support import (
    CollectorThread,
    JavaProcess,
    port_open,
    run_mqadmin_batch,
    wait_for,
)
from tests.support.rocketmq_support import _batch_classes as mqadmin_batch_classes  # cached compile

pytestmark = [pytest.mark.real_broker, pytest.mark.kafka]


REGISTER, QUERY_DATA_VERSION = 103, 322
SETTLE_S = 60  # a registration reaches both sides within a period (10 s); expiry needs 10-15 s


@dataclass
class Broker:
    case: str
    cluster: str
    name: str
    port: int
    process: JavaProcess

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Env:
    root: Path
    namesrv: JavaProcess
    namesrv_port: int
    java: NameServerClient
    tap: RegistrationTap  # in front of routelake's collector
    java_tap: RegistrationTap  # in front of the Java NameServer
    log: EventLog
    bootstrap: str
    topic: str
    brokers: dict[str, Broker] = field(default_factory=dict)
    down_addr: str = ""  # a NameServer address where nothing listens
    started: float = field(default_factory=time.monotonic)

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def tap_addr(self) -> str:
        return f"127.0.0.1:{self.tap.port}"

    def broker(
        self, case: str, cluster: str, name: str, *, extra_namesrvs=(), topics=(), **settings
    ) -> Broker:
        port = free_broker_port()
        home = self.root / case
        if topics:
            write_topics_json(home, list(topics))
        process = broker_process(
            home,
            port,
            [f"127.0.0.1:{self.java_tap.port}", self.tap_addr, *extra_namesrvs],
            cluster=cluster,
            name=name,
            **settings,
        )
        broker = Broker(case, cluster, name, port, process)
        self.brokers[case] = broker
        return broker

    def admin(self, *commands: tuple[str, ...], attempts: int = 3) -> None:
        """Run mqadmin commands (idempotent ones) in one JVM; those that timed out again.

        The admin client waits 3 s for a broker's answer. A broker's updateTopic registers the
        topic at once, under the lock its periodic registration holds: with split registration
        that is ~100 sequential registrations, which take longer than 3 s on a loaded machine."""
        started = time.monotonic()
        for attempt in range(1, attempts + 1):
            results = run_mqadmin_batch(
                commands, namesrv=self.namesrv_addr, home=self.root / "mqadmin"
            )
            failed = [r for r in results if r.error is not None]
            again = [
                r for r in failed if attempt < attempts and "RemotingTimeoutException" in r.stderr
            ]
            for result in failed:
                if result not in again:
                    raise AssertionError(f"{result.argv}: {result.error}\n{result.stderr[-2000:]}")
            if not again:
                break
            commands = tuple(r.argv for r in again)
            print(f"mqadmin: {len(commands)} timed out, again")
        print(f"mqadmin batch: {time.monotonic() - started:.1f}s")

    def views(self, cluster: str) -> tuple[ClusterView, ClusterView, int]:
        java = self.java.view(cluster)
        routelake, until = self.log.routelake_view(cluster, support_acting_master=True)
        return java, routelake, until

    def same_answers(
        self, addr: str, code: int, after_ms: int = 0, before_ms: int = 2**62
    ) -> list[tuple]:
        """Both NameServers answered each of the broker's `code` requests sent in the window
        alike (code and what the broker reads from it); returns those answers."""
        pairs = [
            (j, r)
            for j, r in answer_pairs(self.java_tap, self.tap, addr, code)
            if after_ms <= r.sent_ms < before_ms
        ]
        differ = [(answer(j), answer(r), r.sent_ms) for j, r in pairs if answer(j) != answer(r)]
        assert not differ, f"{addr} code {code}: (java, routelake, sent) {differ}"
        return [answer(r) for _, r in pairs]

    def exchanges_text(self, addr: str) -> str:
        """Both taps' records of one broker's requests, for a failure message."""
        return "\n".join(
            f"{side}: code {x.code} sent {x.sent_ms} answered {x.answered_ms} {answer(x)}"
            for side, tap in (("java", self.java_tap), ("routelake", self.tap))
            for x in tap.of(addr)
            if x.code != 904
        )

    def wait_java(self, cluster: str, what: str, check, timeout: float = 30) -> None:
        """Until the Java NameServer's view passes `check` (a change has reached it)."""
        wait_for(lambda: check(self.java.view(cluster)), timeout, what, step=0.5)

    def wait_same(self, cluster: str, what: str, timeout: float = SETTLE_S) -> ClusterView:
        """Until routelake answers like the Java NameServer for `cluster`; else fail showing
        where they differ."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            java, routelake, until = self.views(cluster)
            if java == routelake:
                print(f"{cluster} {what}: equal after {time.monotonic() - started:.1f}s")
                return java
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: routelake (at {until}) differs from Java:\n"
                    + describe(java, routelake)
                )
            time.sleep(1)


def describe(java: ClusterView, routelake: ClusterView) -> str:
    lines = []
    if java.cluster != routelake.cluster:
        lines.append(f"clusterAddrTable: java {java.cluster} routelake {routelake.cluster}")
    for name in sorted(java.brokers.keys() | routelake.brokers.keys()):
        if java.brokers.get(name) != routelake.brokers.get(name):
            lines.append(
                f"brokerAddrTable[{name}]: java {java.brokers.get(name)} "
                f"routelake {routelake.brokers.get(name)}"
            )
    for topic in sorted(java.routes.keys() | routelake.routes.keys()):
        if java.routes.get(topic) != routelake.routes.get(topic):
            java_route, routelake_route = java.routes.get(topic), routelake.routes.get(topic)
            lines.append(f"route {topic}: java {java_route} routelake {routelake_route}")
    return "\n".join(lines[:40]) + (f"\n... {len(lines) - 40} more" if len(lines) > 40 else "")


# -- the cases' brokers --

NOFORCE = ("noforce", "ModeNoForce", "broker-noforce")
SPLIT = ("split", "ModeSplit", "broker-split")
DOWN = ("down", "ModeDown", "broker-down")
HA = ("ha", "ModeHA", "broker-ha")
SPLIT_SIZE, SPLIT_TOPICS = 3, 300
# BROKER_HEARTBEAT every second and a 10 s heartbeatTimeoutMillis (brokerNotActiveTimeoutMillis)
ACTING = {"enableSlaveActingMaster": "true", "brokerNotActiveTimeoutMillis": 10000}


def split_topics() -> list[dict]:
    """300 topics whose queue numbers, perms and order flags vary."""
    return [
        topic_config(
            f"SPLIT_{i:03d}", 1 + i % 8, 1 + (i * 3) % 8, perm=(6, 6, 4, 2)[i % 4], order=i % 7 == 0
        )
        for i in range(SPLIT_TOPICS)
    ]


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory) -> Iterator[Env]:
    reason = mqadmin.missing_reason()
    if reason is None and not list(mqadmin.jars_dir().glob("rocketmq-broker-*.jar")):
        reason = "no rocketmq-broker jar (run scripts/fetch_rocketmq.sh)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    started = time.monotonic()
    root = tmp_path_factory.mktemp("broker-modes")
    topic = f"rl-modes-{uuid.uuid4().hex[:10]}"
    assert kafka_local.create_topic(kafka_bootstrap, topic, partitions=1)
    ns_port = free_port()
    # supportActingMaster on both sides: a group without its master shows its acting master
    # as id 0 in routes (pickupTopicRouteData); it changes nothing for groups with a master.
    ns = namesrv_process(root / "namesrv", ns_port, supportActingMaster="true").start()
    env: Env | None = None
    try:
        with (
            CollectorThread(kafka_bootstrap, topic, tick_interval_ms=1000) as collector,
            RegistrationTap(collector.port, lookups=ns_port) as tap,
            RegistrationTap(ns_port) as java_tap,
        ):
            log = EventLog(kafka_bootstrap, topic)
            env = Env(
                root,
                ns,
                ns_port,
                NameServerClient(ns_port),
                tap,
                java_tap,
                log,
                kafka_bootstrap,
                topic,
            )
            # Topic configurations are written before the brokers start (faster than admin
            # calls); every case's brokers start together (their JVM start-ups overlap).
            env.broker(*NOFORCE, topics=[topic_config("NF_T1", 2, 2)], forceRegister="false")
            env.broker(
                *SPLIT,
                topics=split_topics(),
                enableSplitRegistration="true",
                splitRegistrationSize=SPLIT_SIZE,
            )
            env.down_addr = f"127.0.0.1:{free_port()}"  # nothing listens: a NameServer down
            env.broker(
                *DOWN, extra_namesrvs=[env.down_addr], topics=[topic_config("DOWN_T1", 4, 4)]
            )
            case, cluster, name = HA
            env.broker(
                f"{case}-master",
                cluster,
                name,
                topics=[topic_config("HA_T1", 4, 4), topic_config("HA_T2", 2, 2, perm=7)],
                **ACTING,
            )
            env.broker(f"{case}-slave", cluster, name, broker_id=1, brokerRole="SLAVE", **ACTING)
            # mqadmin batches run in a JVM of their own, compiled once: meanwhile
            threading.Thread(target=mqadmin_batch_classes, daemon=True).start()
            wait_for(lambda: port_open(ns_port), 60, "the Java NameServer", alive=ns.alive)
            for broker in env.brokers.values():
                broker.process.start()
            env.started = time.monotonic()
            print(f"set-up: {time.monotonic() - started:.1f}s")
            yield env
    finally:
        if env is not None:
            for broker in env.brokers.values():
                broker.process.stop(signal.SIGKILL)
            env.log.close()
        ns.stop(signal.SIGKILL)
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            admin.delete_topics([topic])
        finally:
            admin.close()


def registered(env: Env, broker: Broker, timeout: float = 90) -> None:
    wait_for(
        lambda: broker.name in env.java.view(broker.cluster).brokers,
        timeout,
        f"{broker.name} registered with the Java NameServer",
        step=0.5,
        alive=broker.process.alive,
    )


def events_of(env: Env, addr: str, kind: str, since_ms: int = 0) -> list[dict]:
    return [
        e
        for e in env.log.read()
        if e["eventType"] == kind and e.get("brokerAddr") == addr and e["eventTime"] >= since_ms
    ]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the cases --


def test_force_register_false_skips_unchanged_registrations(env):
    broker = env.brokers["noforce"]
    registered(env, broker)
    print(
        f"{broker.name} registered {time.monotonic() - env.started:.1f}s after the brokers' start"
    )
    env.wait_same(broker.cluster, "after start-up")
    env.admin(
        ("updateTopic", "-b", broker.addr, "-t", "NF_T1", "-r", "8", "-w", "6"),
        ("updateTopic", "-b", broker.addr, "-t", "NF_NEW", "-r", "3", "-w", "3"),
    )
    env.wait_java(broker.cluster, "NF_NEW at the Java NameServer", lambda v: "NF_NEW" in v.routes)
    view = env.wait_same(broker.cluster, "after updateTopic")
    queues = {t: r["queueDatas"][0] for t, r in view.routes.items() if t.startswith("NF_")}
    assert {t: (q["readQueueNums"], q["writeQueueNums"]) for t, q in queues.items()} == {
        "NF_T1": (8, 6),
        "NF_NEW": (3, 3),
    }
    changed = now_ms()  # both incremental registrations (one per updateTopic) are in by now

    # The periodic registration is now a QUERY_DATA_VERSION; routelake's collector knows the
    # broker's dataVersion (from Kafka-acknowledged events) and says unchanged, so does Java:
    # the broker sends no REGISTER_BROKER.
    def skipped() -> bool:
        queries = [
            x
            for x in env.tap.of(broker.addr, QUERY_DATA_VERSION)
            if x.sent_ms > changed and x.answer_ext.get("changed") == "false"
        ]
        return (
            bool(queries)
            and queries[0].answered_ms is not None
            and (now_ms() > queries[0].answered_ms + 3000)
        )

    wait_for(skipped, 30, "an unchanged QUERY_DATA_VERSION", step=0.5)
    query = next(
        x
        for x in env.tap.of(broker.addr, QUERY_DATA_VERSION)
        if x.sent_ms > changed and x.answer_ext.get("changed") == "false"
    )
    later = [x for x in env.tap.of(broker.addr, REGISTER) if x.sent_ms > query.sent_ms]
    assert later == [], "the broker registered although both NameServers said unchanged"
    heartbeats = events_of(env, broker.addr, "HEARTBEAT", query.sent_ms - 50)
    assert heartbeats, "QUERY_DATA_VERSION is published as a HEARTBEAT"
    env.wait_same(broker.cluster, "after a skipped registration")
    # The Java NameServer's answer to the same query (sent to both at once) said so too.
    # (Queries in general are not compared: a broker's periodic query and an updateTopic's
    # registration run on different broker threads and may reach the two NameServers in
    # different orders, and the Java NameServer may run a query before a registration it is
    # still processing; that one answer then differs, both ways round as seen here.)
    java_query = [
        x
        for x in env.java_tap.of(broker.addr, QUERY_DATA_VERSION)
        if abs(x.sent_ms - query.sent_ms) < 1000
    ]
    assert [answer(x) for x in java_query] == [(0, "false")], env.exchanges_text(broker.addr)
    assert env.same_answers(broker.addr, REGISTER)

    # The broker made read-only by an operator: it registers at once (forceRegister or not),
    # every topic's perm masked, with a new dataVersion.
    env.admin(("updateBrokerConfig", "-b", broker.addr, "-k", "brokerPermission", "-v", "4"))
    env.wait_java(
        broker.cluster,
        "read-only at the Java NameServer",
        lambda v: v.routes["NF_NEW"]["queueDatas"][0]["perm"] == 4,
    )
    view = env.wait_same(broker.cluster, "after brokerPermission=4")
    perms = {t: r["queueDatas"][0]["perm"] for t, r in view.routes.items() if t.startswith("NF_")}
    assert perms == {"NF_T1": 4, "NF_NEW": 4}
    broker.process.stop(signal.SIGKILL)


def test_split_registration_of_300_topics(env):
    broker = env.brokers["split"]
    registered(env, broker)
    view = env.wait_same(broker.cluster, "after start-up", timeout=90)
    split = {t for t in view.routes if t.startswith("SPLIT_")}
    assert len(split) == SPLIT_TOPICS
    registers = events_of(env, broker.addr, "REGISTER")
    assert registers and all(len(e["topicConfigTable"]) <= SPLIT_SIZE for e in registers)
    assert len({json.dumps(e["dataVersion"], sort_keys=True) for e in registers}) == len(
        registers
    ), "every part carries its own dataVersion"
    # one full round covers every topic in parts of SPLIT_SIZE
    assert len(registers) >= SPLIT_TOPICS // SPLIT_SIZE

    changed = now_ms()
    env.admin(
        ("updateTopic", "-b", broker.addr, "-t", "SPLIT_007", "-r", "16", "-w", "16"),
        ("updateTopic", "-b", broker.addr, "-t", "SPLIT_150", "-r", "1", "-w", "2", "-p", "4"),
        ("updateTopic", "-b", broker.addr, "-t", "SPLIT_NEW", "-r", "5", "-w", "5"),
    )
    env.wait_java(
        broker.cluster,
        "the changes at the Java NameServer",
        lambda v: (
            "SPLIT_NEW" in v.routes
            and v.routes["SPLIT_007"]["queueDatas"][0]["readQueueNums"] == 16
            and v.routes["SPLIT_150"]["queueDatas"][0]["perm"] == 4
        ),
    )
    view = env.wait_same(broker.cluster, "after updateTopic")
    assert view.routes["SPLIT_007"]["queueDatas"][0]["readQueueNums"] == 16
    assert view.routes["SPLIT_150"]["queueDatas"][0]["perm"] == 4
    assert "SPLIT_NEW" in view.routes

    # The next periodic round (every topic again, in parts) changes nothing on either side.
    def full_round() -> bool:
        topics = set()
        for e in events_of(env, broker.addr, "REGISTER", changed + 1000):
            topics |= e["topicConfigTable"].keys()
        return len(topics) > SPLIT_TOPICS

    wait_for(full_round, 30, "a full split round after the change", step=1)
    assert env.wait_same(broker.cluster, "after a full round") == view
    assert len(env.same_answers(broker.addr, REGISTER)) > 2 * SPLIT_TOPICS // SPLIT_SIZE
    broker.process.stop(signal.SIGKILL)


def test_master_and_slave_then_the_master_killed(env):
    """A master and a slave of one group, both enableSlaveActingMaster (BROKER_HEARTBEAT every
    second, a 10 s heartbeat timeout); then kill -9 of the master: both drop it on its
    connection's close (routelake: the collector's CHANNEL_CLOSED). Both then list the slave
    alone, every topic of the group without its write permission."""
    _, cluster, name = HA
    master, slave = env.brokers["ha-master"], env.brokers["ha-slave"]
    wait_for(
        lambda: len(env.java.view(cluster).brokers.get(name, {}).get("brokerAddrs", {})) == 2,
        90,
        "master and slave registered with the Java NameServer",
        step=0.5,
        alive=lambda: master.process.alive() and slave.process.alive(),
    )
    view = env.wait_same(cluster, "master and slave")
    assert view.brokers[name]["brokerAddrs"] == {"0": master.addr, "1": slave.addr}
    assert view.routes["HA_T1"]["queueDatas"][0]["perm"] == 6
    slave_registers = events_of(env, slave.addr, "REGISTER")
    assert slave_registers and all(e["brokerId"] == 1 for e in slave_registers)
    # A slave learns its master from the answer to its registration: both NameServers name
    # the master once they hold it (answers to a request sent after both acknowledged the
    # master's first registration).
    master_known = max(
        x.answered_ms or 2**62
        for tap in (env.java_tap, env.tap)
        for x in tap.of(master.addr, REGISTER)[:1]
    )
    wait_for(
        lambda: any(
            r.sent_ms > master_known
            for _, r in answer_pairs(env.java_tap, env.tap, slave.addr, 103)
        ),
        25,
        "a slave registration after the master's",
        step=0.5,
    )
    told = env.same_answers(slave.addr, REGISTER, after_ms=master_known)
    assert told[-1] == (0, master.addr, f"127.0.0.1:{master.port + 1}"), told

    master.process.stop(signal.SIGKILL)
    killed, killed_ms = time.monotonic(), now_ms()
    wait_for(
        lambda: (
            env.java.view(cluster).brokers.get(name, {}).get("brokerAddrs") == {"1": slave.addr}
        ),
        30,
        "the Java NameServer without the master",
        step=0.2,
    )
    java_dropped = time.monotonic() - killed
    view = env.wait_same(cluster, "after the master was killed")
    print(
        f"master killed: the Java NameServer dropped it after {java_dropped:.1f}s (its channel "
        f"closed), routelake equal after {time.monotonic() - killed:.1f}s (its CHANNEL_CLOSED)"
    )
    assert view.brokers[name]["brokerAddrs"] == {"1": slave.addr}
    perms = {t: r["queueDatas"][0]["perm"] for t, r in view.routes.items() if t.startswith("HA_")}
    assert perms == {"HA_T1": 4, "HA_T2": 5}  # write permission wiped, read (and inherit) kept
    # Routes present the acting master as the group's id 0 (supportActingMaster), but not the
    # route the slave itself uses to find its group's members.
    acting = {t: r["brokerDatas"][0]["brokerAddrs"] for t, r in view.routes.items()}
    assert acting["HA_T1"] == {"0": slave.addr}
    assert acting[f"rmq_sys_SYNC_BROKER_MEMBER_{name}"] == {"1": slave.addr}
    # routelake learnt it from the close of the master's connection (contract "Connections"):
    # nothing else of the master's after the kill.
    after_kill = [
        e["eventType"]
        for e in env.log.read()
        if e.get("brokerAddr") == master.addr and e["eventTime"] > killed_ms
    ]
    assert set(after_kill) <= {"CHANNEL_CLOSED"}
    assert any(
        e["eventType"] == "CHANNEL_CLOSED" and e["brokerAddr"] == master.addr
        for e in env.log.read()
    )
    # Once routelake expired the master too, both tell the slave it has none.
    expired = now_ms()
    wait_for(
        lambda: any(
            r.sent_ms > expired for _, r in answer_pairs(env.java_tap, env.tap, slave.addr, 103)
        ),
        25,
        "a slave registration after the master's expiry",
        step=0.5,
    )
    assert env.same_answers(slave.addr, REGISTER, after_ms=expired)[-1] == (0, None, None)
    # The slave found itself the group's smallest id and started the master's services.
    log = slave.process.home / "logs" / "rocketmqlogs" / "broker.log"
    wait_for(
        lambda: (
            "Min broker changed, old: 0-" in log.read_text(errors="replace")
            and f"new 1-{slave.addr}" in log.read_text(errors="replace")
        ),
        30,
        "the slave acting as master",
        step=1,
    )
    slave.process.stop(signal.SIGKILL)


def test_topics_change_while_another_nameserver_is_down(env):
    broker = env.brokers["down"]
    registered(env, broker)
    env.wait_same(broker.cluster, "after start-up")
    env.admin(
        ("updateTopic", "-b", broker.addr, "-t", "DOWN_T1", "-r", "6", "-w", "6"),
        ("updateTopic", "-b", broker.addr, "-t", "DOWN_NEW", "-r", "2", "-w", "2"),
    )
    env.wait_java(
        broker.cluster, "DOWN_NEW at the Java NameServer", lambda v: "DOWN_NEW" in v.routes
    )
    view = env.wait_same(broker.cluster, "after updateTopic")
    assert view.routes["DOWN_T1"]["queueDatas"][0]["readQueueNums"] == 6
    assert "DOWN_NEW" in view.routes
    logs = broker.process.home / "logs" / "rocketmqlogs"
    tried = [
        line
        for path in logs.glob("*.log")
        for line in path.read_text(errors="replace").splitlines()
        if env.down_addr in line
    ]
    print(f"the broker's log lines naming the NameServer that is down: {len(tried)}")
    assert tried, "the broker never tried the NameServer that is down"
    assert env.same_answers(broker.addr, REGISTER)
    # A graceful stop unregisters from the NameServers that are up, despite the one down.
    broker.process.stop(signal.SIGTERM, timeout=60)
    view = env.wait_same(broker.cluster, "after the broker's shutdown")
    assert view.brokers == {} and view.routes == {}


@pytest.mark.spark
def test_the_streaming_job_publishes_the_replayed_tables(env, spark, config):
    """The comparisons above take routelake's side from the reference replay; here the
    streaming job itself (`routectl run --available-now`, in-process on the test session's
    Spark) reads every case's events from Kafka: its tables equal the replay's State(W) at the
    watermark W it published."""
    from routing_lib.jobs.route_state import run_route_state

    started, ended_ms = time.monotonic(), now_ms()
    warehouse = env.root / "warehouse"
    job_config = config.with_overrides(
        "paths", warehouse=str(warehouse), checkpoint=str(env.root / "checkpoint")
    ).with_overrides("kafka", topic=env.topic, bootstrap_servers=env.bootstrap)
    run_route_state(job_config, available_now=True, install_signal_handlers=False)
    delay = job_config.routes.watermark_delay_ms
    snapshot = load_snapshot(warehouse)
    # The job read the offsets there were when it started; the collector's TICKs went on. No
    # event came more than the watermark delay after its eventTime, so State(W) of every event
    # in Kafka now is State(W) of the ones the job read.
    env.log.read()
    assert snapshot.watermark is not None
    assert ended_ms - delay - 2000 <= snapshot.watermark  # a TICK every second before it
    assert snapshot.watermark <= default_watermark(env.log.events, delay)
    assert project(snapshot.dump()) == project(replay_dump(env.log.events, snapshot.watermark))
    print(f"streaming job over {len(env.log.events)} events: {time.monotonic() - started:.1f}s")
