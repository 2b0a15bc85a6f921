"""A real RocketMQ 5.3.3 broker whose connection ends (issue 34, contract "Connections"). One
stack for the module, in tap mode:

    broker --namesrvAddr="Java NameServer;routectl collect" ; collect -> Kafka -> routectl run
    -> Delta <- routectl serve (the lookup, asked like a NameServer)

The broker registers every 10 s and sends no heartbeatTimeoutMillis, so both NameServers would
keep it 120 s after its last registration: only its connection's end removes it sooner. The
job runs with the defaults that make up how current routelake is (watermarkDelay 10 s, the
collector's TICK when the close is due, a 1 s trigger, the lookup's 1 s refresh). Tests run in
file order: the collector restarted under the live broker (it stays), then the broker killed
(it leaves through its connection, which the restart must have retired the old one for), then
started again and stopped cleanly (it leaves once).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from routelake_dev import kafka_local, mqadmin
from routing_lib.history_recipes import load_frames
from routing_lib.lookup import jsonbody
from routing_lib.remoting.protocol import RequestCode, ResponseCode
from tests.support.broker_modes_support import (
    NameServerClient,
    broker_process,
    free_broker_port,
    free_port,
    namesrv_process,
)
from tests.support.collector_support import start_collector, stop_collector
from tests.support.cpu_budget import wall_scale
from tests.support.job_commands import run_args
from tests.support.rocketmq_support import JavaProcess, events, port_open, wait_for

pytestmark = [pytest.mark.real_broker, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).parent.parent
CLUSTER, NAME, COLLECTOR_ID = "ChannelCluster", "broker-ch", "rl-channels"
TOPIC = "SELF_TEST_TOPIC"  # every broker registers it: its route is the broker's
POLL_S = 0.2  # how often the kill test asks both NameServers
KILL_TO_JAVA_S = 5.0  # "at once": 0.0-0.5 s measured; slack for a loaded machine
# issue 34's goal with default settings, printed beside the figure: 10 s watermark delay + the
# collector's TICK at the close + 10 s + the batch that reads it and the next one, which applies
# it (1 s trigger) + the lookup's refresh (1 s poll); docs/brokers.md has the measured parts.
KILL_GOAL_S = 15.0
# What is asserted: the goal + 5 s for batches slowed by a second lane of the suite (measured:
# 12.7-13.1 s at load 2-3, 14.5-14.7 at 6-8, 14.2-18.0 at 12-14, 16.1-24.2 at 13-26);
# ROUTELAKE_WALL_BUDGET_SCALE widens it on a machine shared with other work.
KILL_TO_ROUTELAKE_S = (KILL_GOAL_S + 5.0) * wall_scale(os.environ)
KILL_WAIT_S = max(60.0, 2 * KILL_TO_ROUTELAKE_S)  # past the bound too: a failure shows the parts
WATERMARK_DELAY_MS = 10_000  # [routes] watermark_delay_ms, the default
FIRST_ROUTE_WAIT_S = 240  # Spark's start on a loaded machine, the broker's, a first batch
ROUTE_WAIT_S = 60  # an event -> watermark (10 s) -> batch -> refresh, on a loaded machine


@dataclass
class Stack:
    root: Path
    bootstrap: str
    topic: str
    namesrv: JavaProcess
    broker: JavaProcess
    namesrv_port: int
    broker_port: int
    collector_port: int
    lookup_port: int
    http_port: int
    collector: subprocess.Popen | None = None
    job: subprocess.Popen | None = None
    lookup: subprocess.Popen | None = None
    collector_starts: int = 0

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start_collector(self) -> None:
        self.collector_starts += 1
        self.collector, _ = start_collector(
            self.bootstrap,
            self.topic,
            self.root / f"collect-{self.collector_starts}.log",
            "--port",
            str(self.collector_port),
            "--collector-id",
            COLLECTOR_ID,
        )

    def all_alive(self) -> bool:
        processes = (self.collector, self.job, self.lookup)
        return self.broker.alive() and all(p is not None and p.poll() is None for p in processes)

    def collector_log(self) -> str:
        return (self.root / f"collect-{self.collector_starts}.log").read_text(errors="replace")

    def events(self, kind: str | None = None, *, ticks: bool = False) -> list[dict[str, Any]]:
        got = events(self.bootstrap, self.topic, ticks=ticks)
        return [e for e in got if kind is None or e["eventType"] == kind]


def routectl(root: Path, name: str, *args: str) -> subprocess.Popen:
    with (root / f"{name}.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "routing_lib.cli", *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM, SIGKILL after 30 s (any of the stack's processes, as for a collector)."""
    if proc is not None:
        stop_collector(proc)


def _missing_jars() -> str | None:
    reason = mqadmin.missing_reason()
    if reason is None and not list(mqadmin.jars_dir().glob("rocketmq-broker-*.jar")):
        reason = "no rocketmq-broker jar (run scripts/fetch_rocketmq.sh)"
    return reason


@pytest.fixture(scope="module")
def stack(kafka_bootstrap, tmp_path_factory) -> Iterator[Stack]:
    if (reason := _missing_jars()) is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("real-broker-channels")
    _LOG_ROOTS.append(root)
    topic = f"rl-channels-{os.getpid()}-{time.time_ns() % 10**9}"
    assert kafka_local.create_topic(kafka_bootstrap, topic, partitions=1)
    ns_port, collector_port, lookup_port, http_port = (free_port() for _ in range(4))
    broker_port = free_broker_port()
    namesrv = namesrv_process(root / "namesrv", ns_port)
    broker = broker_process(
        root / "broker",
        broker_port,
        [f"127.0.0.1:{ns_port}", f"127.0.0.1:{collector_port}"],
        cluster=CLUSTER,
        name=NAME,
    )
    s = Stack(
        root,
        kafka_bootstrap,
        topic,
        namesrv,
        broker,
        ns_port,
        broker_port,
        collector_port,
        lookup_port,
        http_port,
    )
    warehouse = str(root / "warehouse")
    try:
        namesrv.start()
        s.start_collector()
        s.job = routectl(
            root,
            "job",
            *run_args(
                kafka_bootstrap,
                topic,
                warehouse,
                root / "checkpoint",
                "-v",
            ),
        )
        s.lookup = routectl(
            root,
            "lookup",
            "serve",
            "--warehouse",
            warehouse,
            "--port",
            str(lookup_port),
            "--http-port",
            str(http_port),
            "--workers",
            "1",
        )
        wait_for(lambda: port_open(ns_port), 60, "the Java NameServer", alive=namesrv.alive)
        broker.start()
        yield s
    finally:
        broker.stop(signal.SIGKILL)
        stop(s.collector)
        stop(s.lookup)
        stop(s.job)
        namesrv.stop(signal.SIGKILL)
        _delete_topic(kafka_bootstrap, topic)


def _delete_topic(bootstrap: str, topic: str) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()


_LOG_ROOTS: list[Path] = []
LOG_TAIL_LINES = 60


def failure_logs() -> dict[str, str]:
    """The tails of the stack's logs, for a failed test's report."""
    tails = {}
    for root in _LOG_ROOTS:
        logs = [*root.glob("*.log"), root / "broker/logs/rocketmqlogs/broker.log"]
        for log in sorted(p for p in logs if p.is_file()):
            lines = log.read_text(errors="replace").splitlines()
            tails[log.name] = "\n".join(lines[-LOG_TAIL_LINES:])
    return tails


# -- asking both NameServers --


def serves_broker(port: int) -> bool:
    """The NameServer on `port` routes TOPIC to the broker (False while it cannot answer)."""
    try:
        [answer] = NameServerClient(port).ask_many(
            [(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})]
        )
    except (OSError, AssertionError):
        return False
    if answer.code != ResponseCode.SUCCESS:
        return False
    route = jsonbody.parse_legacy(answer.body)
    return any(b["brokerName"] == NAME for b in route["brokerDatas"])


def served_watermark(stack: Stack) -> int:
    url = f"http://127.0.0.1:{stack.http_port}/clusters"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(json.loads(answer.read())["watermark"] or 0)
    except OSError:
        return 0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def incarnation(channel: str) -> int:
    return int(channel.split("@")[1].split("#")[0])


def broker_history(stack: Stack, table: str) -> list[dict[str, Any]]:
    frame = load_frames(stack.root / "warehouse", [table])[table]
    rows = frame[frame["broker_addr"] == stack.broker_addr].astype(object)
    return sorted(
        (
            {k: (None if v is None or v != v else v) for k, v in row.items()}  # NA -> None
            for row in rows.to_dict("records")
        ),
        key=lambda r: (r.get("valid_from") or r.get("event_time"), r.get("seq") or 0),
    )


_BATCH_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO routelake\.route_state: "
    r"batch \d+ published: watermark (\d+)",
    re.MULTILINE,
)


def _stamp_ms(match: re.Match[str]) -> int:
    stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp()
    return int(stamp * 1000) + int(match[2])


def applied_at_ms(job_log: str, event_time: int) -> tuple[int, int] | None:
    """When the job published the batch before the first batch whose watermark reached
    `event_time` (the batch that read the event moving Spark's watermark there), and that
    first batch (its log's local clock, in epoch ms)."""
    before = None
    for match in _BATCH_LINE.finditer(job_log):
        if int(match[3]) >= event_time:
            return (_stamp_ms(before) if before else 0), _stamp_ms(match)
        before = match
    return None


@dataclass
class KillTimeline:
    """Epoch ms of each step from a kill to the lookup's answer without the broker."""

    killed: int
    closed: int  # the CHANNEL_CLOSED's eventTime: the collector saw the connection end
    under_watermark: int  # the first TICK at closed + watermarkDelay: the close is under W
    read: int  # the job published the batch that read that TICK (0: not found in its log)
    applied: int  # the job published the next batch, the first whose watermark reached the close
    lookup_gone: int  # the lookup stopped routing to the broker

    @classmethod
    def read_from(cls, stack: Stack, killed: int, closed: int, lookup_gone: int) -> KillTimeline:
        ticks = [e["eventTime"] for e in stack.events("TICK", ticks=True)]
        under = min((t for t in ticks if t - WATERMARK_DELAY_MS >= closed), default=0)
        job_log = (stack.root / "job.log").read_text(errors="replace")
        read, applied = applied_at_ms(job_log, closed) or (0, 0)
        return cls(killed, closed, under, read, applied, lookup_gone)

    def describe(self) -> str:
        def s(since: int, until: int) -> str:
            return f"{(until - since) / 1000:.1f} s"

        return (
            f"routelake's lookup after {s(self.killed, self.lookup_gone)} = "
            f"the collector's CHANNEL_CLOSED {s(self.killed, self.closed)} "
            f"+ the first TICK {WATERMARK_DELAY_MS // 1000} s (watermarkDelay) later "
            f"{s(self.closed, self.under_watermark)} "
            f"+ the job's batch that read it, published {s(self.under_watermark, self.read)} "
            f"later + the next batch (Spark applies a watermark from the batch after the one "
            f"that saw it), published {s(self.read, self.applied)} later "
            f"+ the lookup's refresh {s(self.applied, self.lookup_gone)}"
        )


# -- the tests, in order --


def wait_until_both_serve_the_broker(stack) -> None:
    wait_for(
        lambda: serves_broker(stack.namesrv_port) and serves_broker(stack.lookup_port),
        FIRST_ROUTE_WAIT_S,
        "the broker's routes from the Java NameServer and routelake",
        step=0.5,
        alive=stack.all_alive,
    )


def test_both_nameservers_serve_the_broker(stack):
    wait_until_both_serve_the_broker(stack)
    [first, *_] = stack.events("REGISTER")
    assert "heartbeatTimeoutMillis" not in first  # the NameServer's 120 s applies
    assert first["channel"].startswith(f"{COLLECTOR_ID}@")


def test_a_restarted_collector_does_not_remove_the_live_broker(stack):
    """SIGTERM closes the broker's connection from the collector's side: nothing published;
    the broker's next registration arrives on the new incarnation's connection, which drops
    the old one from its set without removing it."""
    [old_channel] = {e["channel"] for e in stack.events("REGISTER")}
    stop_collector(stack.collector)
    assert "publishing CHANNEL_CLOSED" not in stack.collector_log()
    stack.start_collector()

    def new_registration() -> dict[str, Any] | None:
        later = [
            e
            for e in stack.events("REGISTER")
            if incarnation(e["channel"]) > incarnation(old_channel)
        ]
        return later[0] if later else None

    # The broker stays routable until the job applied its registration on the new connection.
    deadline = time.monotonic() + ROUTE_WAIT_S
    while (registered := new_registration()) is None or served_watermark(stack) < registered[
        "eventTime"
    ]:
        assert serves_broker(stack.lookup_port), "routelake dropped the live broker"
        assert time.monotonic() < deadline, "the registration on the new connection not applied"
        time.sleep(0.5)
    assert serves_broker(stack.lookup_port)
    assert stack.events("CHANNEL_CLOSED") == []
    ends = [r for r in broker_history(stack, "broker_membership_history") if r["valid_to"]]
    assert ends == []


def test_a_killed_broker_leaves_routelake_once_its_close_is_under_the_watermark(stack):
    """kill -9: the broker's TCP connections close; the Java NameServer drops it at once
    (onChannelDestroy), routelake once the collector's CHANNEL_CLOSED is under the watermark."""
    wait_until_both_serve_the_broker(stack)  # at once after the tests before it; also alone
    stack.broker.stop(signal.SIGKILL)
    killed, killed_ms = time.monotonic(), now_ms()
    gone: dict[str, float] = {}
    while len(gone) < 2 and time.monotonic() - killed < KILL_WAIT_S:
        for who, port in (("java", stack.namesrv_port), ("routelake", stack.lookup_port)):
            if who not in gone and not serves_broker(port):
                gone[who] = time.monotonic() - killed
        time.sleep(POLL_S)
    [closed] = stack.events("CHANNEL_CLOSED")
    routelake_gone = killed_ms + int(1000 * gone.get("routelake", KILL_WAIT_S))
    timeline = KillTimeline.read_from(stack, killed_ms, closed["eventTime"], routelake_gone)
    print(
        f"kill -9: the Java NameServer stopped routing to the broker after "
        f"{gone.get('java', float('nan')):.1f} s; {timeline.describe()} "
        f"(issue 34's goal: {KILL_GOAL_S:.0f} s)"
    )
    assert gone.get("java", 99) <= KILL_TO_JAVA_S
    assert timeline.closed - timeline.killed <= 1000  # the collector saw the end at once
    assert timeline.applied, "no batch's watermark reached the close"
    # the lookup follows the job within its refresh (1 s) and a snapshot's load
    assert timeline.lookup_gone - timeline.applied <= 3000
    assert (closed["brokerAddr"], closed["brokerName"]) == (stack.broker_addr, NAME)
    assert incarnation(closed["channel"]) == max(
        incarnation(e["channel"]) for e in stack.events("REGISTER")
    )
    [left] = [r for r in broker_history(stack, "broker_membership_history") if r["valid_to"]]
    assert (left["valid_to"], left["end_reason"]) == (closed["eventTime"], "CHANNEL_CLOSED")
    liveness = [r["event_type"] for r in broker_history(stack, "broker_liveness_events")]
    assert liveness[-1] == "CHANNEL_CLOSED" and "EXPIRED" not in liveness
    # last: the rest holds whatever the machine's load made of the time
    assert gone.get("routelake", 99) <= KILL_TO_ROUTELAKE_S


def test_a_broker_stopped_cleanly_leaves_once(stack):
    """SIGTERM: the broker sends UNREGISTER, then its connection closes. The UNREGISTER removes
    it; the CHANNEL_CLOSED after it finds it gone and changes nothing: one interval end."""
    before_ms = now_ms()
    stack.broker.start()
    wait_for(
        lambda: serves_broker(stack.namesrv_port) and serves_broker(stack.lookup_port),
        ROUTE_WAIT_S + 30,  # the broker's start-up too
        "the restarted broker's routes from both",
        step=0.5,
        alive=stack.broker.alive,
    )
    stack.broker.stop(signal.SIGTERM, timeout=60)
    wait_for(
        lambda: not serves_broker(stack.namesrv_port) and not serves_broker(stack.lookup_port),
        ROUTE_WAIT_S,
        "the stopped broker gone from both",
        step=0.5,
    )
    after = [e for e in stack.events() if e["eventTime"] >= before_ms]
    unregister = [e for e in after if e["eventType"] == "UNREGISTER"]
    wait_for(
        lambda: (
            len([e for e in stack.events("CHANNEL_CLOSED") if e["eventTime"] >= before_ms]) == 1
        ),
        30,
        "the connection's close after the UNREGISTER",
    )
    [closed] = [e for e in stack.events("CHANNEL_CLOSED") if e["eventTime"] >= before_ms]
    assert len(unregister) == 1 and unregister[0]["eventTime"] <= closed["eventTime"]
    wait_for(
        lambda: served_watermark(stack) >= closed["eventTime"],
        ROUTE_WAIT_S,
        "the close applied",
    )
    ends = [
        r
        for r in broker_history(stack, "broker_membership_history")
        if r["valid_from"] >= before_ms
    ]
    assert [(r["valid_to"], r["end_reason"]) for r in ends] == [
        (unregister[0]["eventTime"], "UNREGISTERED")
    ]
    liveness = [
        r["event_type"]
        for r in broker_history(stack, "broker_liveness_events")
        if r["event_time"] >= before_ms
    ]
    assert liveness.count("UNREGISTERED") == 1 and "CHANNEL_CLOSED" not in liveness
    assert liveness[-1] == "UNREGISTERED"
