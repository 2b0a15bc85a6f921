"""The live stream bench's measurement: the simulated fleet producing from a process of its own
(bench/fleet_process.py) against the local Kafka, and the freshness it prints, timed from
Kafka's acknowledgement (docs/benchmarks.md "Freshness at 300 x 10 000")."""

from __future__ import annotations

import json

import pytest

from bench.fleet_process import WATCHED_FIELDS, Change, FleetProcess, FleetSpec, partition_cut
from bench.stream_bench import freshness_summary


def test_freshness_is_timed_from_kafkas_acknowledgement() -> None:
    started = 1000.0
    changes = {
        # sent 30 s into the run, in Kafka 5 s later, visible 20 s after the send
        ("a", 0, 1, 1): Change(1, "broker-0", sent=started + 30, acked=started + 35),
        # sent after the first minute: 1 s of delivery, visible 13 s after the send
        ("b", 0, 1, 1): Change(2, "broker-1", sent=started + 70, acked=started + 71),
        # never seen: counted as measured, not in the percentiles
        ("c", 0, 1, 1): Change(3, "broker-2", sent=started + 80, acked=started + 80.5),
    }
    seen_at = {("a", 0, 1, 1): started + 50, ("b", 0, 1, 1): started + 83}

    everything, after_first_minute = freshness_summary(changes, started, seen_at).splitlines()

    assert everything.startswith("freshness of the 2 of 3 changes: ")
    assert "acknowledgement to broker_live_table p50 13.5 s, p95 15.0 s, max 15.0 s" in everything
    assert "delivery (send -> acknowledged) p50 3.0 s, p95 5.0 s" in everything
    assert "from the bench's send (the figure of before) p50 16.5 s, p95 20.0 s" in everything
    assert after_first_minute.startswith(
        "freshness of the 1 of 2 changes produced after the first minute: "
    )
    assert "acknowledgement to broker_live_table p50 12.0 s" in after_first_minute
    assert "delivery (send -> acknowledged) p50 1.0 s" in after_first_minute


def test_no_change_seen() -> None:
    changes = {("a", 0, 1, 1): Change(1, "broker-0", sent=10.0, acked=11.0)}
    assert freshness_summary(changes, 0.0, {}) == "freshness: no change became visible"


def test_partition_cuts_the_first_groups_by_name() -> None:
    names = [f"broker-{i}" for i in range(10)]
    assert partition_cut(names, 0.5) == {f"broker-{i}" for i in (0, 1, 2, 3, 4)}
    assert partition_cut(names, 0.0) == set()


def _read_topic(bootstrap: str, topic: str) -> list[dict]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    end = consumer.end_offsets([partition])[partition]
    events: list[dict] = []
    while len(events) < end:
        for records in consumer.poll(2000).values():
            events.extend(json.loads(r.value) for r in records)
    consumer.close()
    return events


@pytest.mark.kafka
def test_fleet_process_sends_the_fleet_and_reports_each_change(
    kafka_bootstrap: str, topic: str
) -> None:
    spec = FleetSpec(kafka_bootstrap, topic, 10, 10, 20_000, None, 8.0, 60.0, 1000, warm_up_s=0)
    fleet = FleetProcess(spec).start()
    report = fleet.wait(120)

    events = _read_topic(kafka_bootstrap, topic)
    assert len(events) == report.sent > 0  # the fleet is seeded: the same events every run
    assert sorted(fleet.names) == [f"broker-{i}" for i in range(10)]
    assert max(e["eventTime"] for e in events) == report.last_event_time
    assert all(e["eventTime"] - fleet.wall_start_ms < 8_000 for e in events)
    # every first registration of a (brokerAddr, dataVersion) is a measured change, with the
    # time Kafka acknowledged it
    registers = {
        (e["brokerAddr"], *(e["dataVersion"][k] for k in ("stateVersion", "timestamp", "counter")))
        for e in events
        if e["eventType"] == "REGISTER"
    }
    assert set(fleet.changes) == registers
    for change in fleet.changes.values():
        assert change.acked is not None
        assert change.sent <= change.acked < report.ended + 1


@pytest.mark.kafka
def test_fleet_process_stops_when_told(kafka_bootstrap: str, topic: str) -> None:
    spec = FleetSpec(kafka_bootstrap, topic, 2, 10, 20_000, None, 0, 600.0, 1000, warm_up_s=0)
    fleet = FleetProcess(spec).start()
    fleet.stop()
    report = fleet.wait(60)  # no duration: only the stop ends it
    assert report.ended - fleet.started < 30
    assert len(_read_topic(kafka_bootstrap, topic)) == report.sent


@pytest.mark.kafka
def test_fleet_process_partition_silences_and_forwards_the_cut_off_groups(
    kafka_bootstrap: str, topic: str
) -> None:
    # the first half of the groups by name send nothing from 2 s to 6 s of event time
    spec = FleetSpec(
        kafka_bootstrap, topic, 10, 10, 20_000, None, 10.0, 60.0, 1000, (2.0, 0.5, 4.0), 0
    )
    fleet = FleetProcess(spec).start()
    forwarded: list[dict] = []
    returns: list[tuple[str, float]] = []
    fleet.on_cut_off_event(forwarded.append, lambda name, acked: returns.append((name, acked)))
    report = fleet.wait(120)

    cut = partition_cut(fleet.names, 0.5)
    start, end = fleet.wall_start_ms + 2_000, fleet.wall_start_ms + 6_000
    events = _read_topic(kafka_bootstrap, topic)
    assert report.silenced > 0  # the fleet is seeded: the same events every run
    assert not [e for e in events if e["brokerName"] in cut and start <= e["eventTime"] < end]
    sent_cut = [(e["brokerAddr"], e["eventTime"]) for e in events if e["brokerName"] in cut]
    assert [(e["brokerAddr"], e["eventTime"]) for e in forwarded] == sent_cut
    assert all(set(e) == set(WATCHED_FIELDS) for e in forwarded)
    # each cut-off group's first REGISTER after the partition that brings its routes back
    # (its master's, or a slave's where acting master is enabled) is reported once, when
    # Kafka acknowledged it: not before it was due on the fleet's clock
    first_return: dict[str, int] = {}
    for e in events:
        if e["brokerName"] in cut and e["eventType"] == "REGISTER" and e["eventTime"] >= end:
            if e["brokerId"] == 0 or e.get("enableActingMaster"):
                first_return.setdefault(e["brokerName"], e["eventTime"])
    assert first_return  # the fleet is seeded: the same registrations every run
    assert sorted(name for name, _ in returns) == sorted(first_return)
    for name, acked in returns:
        due = fleet.started + (first_return[name] - fleet.wall_start_ms) / 1000
        assert due <= acked <= report.ended + 1
