"""The fleet simulator: determinism, valid events, bounded disorder, every fault kind."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from functools import cache

import pytest

from routelake_dev.simulator import (
    DEFAULT_START_MS,
    FAULT_KINDS,
    ArchiveWriter,
    EventEncoder,
    FleetSimulator,
    encode_event,
    generate_history,
    iter_file_lines,
    line_key,
    simulate,
    simulate_history,
)
from routing_lib.core.group_routes import Event
from routing_lib.core.replay import replay_dump
from schemas.route_event import DEFAULT_HEARTBEAT_TIMEOUT_MILLIS, parse_event

HOUR = 3_600_000


def lines(events: list[dict]) -> list[bytes]:
    return [encode_event(e) for e in events]


@cache
def long_history(disorder_ms: int = 0) -> tuple[list[dict], list]:
    return simulate_history(11, brokers=12, topics=8, duration_ms=2 * HOUR, disorder_ms=disorder_ms)


def test_same_seed_same_history() -> None:
    first = generate_history(5, 6, 10, HOUR, disorder_ms=3000)
    second = generate_history(5, 6, 10, HOUR, disorder_ms=3000)
    assert first and lines(first) == lines(second)


def test_different_seed_differs() -> None:
    assert lines(generate_history(5, 6, 10, HOUR)) != lines(generate_history(6, 6, 10, HOUR))


def test_disorder_does_not_change_the_events() -> None:
    ordered = generate_history(5, 6, 10, HOUR)
    shuffled = generate_history(5, 6, 10, HOUR, disorder_ms=5000)
    assert lines(ordered) != lines(shuffled)
    assert sorted(lines(ordered)) == sorted(lines(shuffled))
    # eventTimes are unique per group, so the reference state ignores arrival order
    until = max(e["eventTime"] for e in ordered) - 10_000
    parsed = [[parse_event(encode_event(e)) for e in history] for history in (ordered, shuffled)]
    assert replay_dump(parsed[0], until) == replay_dump(parsed[1], until)


def test_events_validate_and_stay_in_the_window() -> None:
    events, _ = long_history()
    encode = EventEncoder()
    for event in events:
        raw = encode(event)
        assert raw == encode_event(event)
        parsed = parse_event(raw)
        assert parsed.eventType == event["eventType"]
        assert DEFAULT_START_MS <= event["eventTime"] < DEFAULT_START_MS + 2 * HOUR


def test_encoder_encodes_each_table_of_a_cycling_fleet_once() -> None:
    """Groups register in turn, each sharing its table object across registrations: a cache
    that holds them all encodes each table once however many periods pass; one smaller than
    the cycle (LRU) encodes every registration again."""
    tables = [{f"T{g}-{t}": {"perm": 6, "readQueueNums": 8} for t in range(50)} for g in range(4)]
    events = [
        {"eventType": "REGISTER", "brokerName": f"g{g}", "topicConfigTable": tables[g]}
        for _period in range(5)
        for g in range(4)
    ]
    table_bytes = len(json.dumps(tables[0], separators=(",", ":")))
    roomy, tight = EventEncoder(), EventEncoder(cache_bytes=3 * table_bytes + 10)
    for event in events:
        assert roomy(event) == tight(event) == encode_event(event)
    assert roomy.tables_encoded == 4
    assert tight.tables_encoded == len(events)  # why the default bound holds a whole fleet


def test_without_disorder_events_arrive_in_time_order() -> None:
    times = [e["eventTime"] for e in long_history()[0]]
    assert times == sorted(times)


def test_event_times_are_unique_within_a_broker_group() -> None:
    seen: dict[str, set[int]] = defaultdict(set)
    for event in long_history()[0]:
        assert event["eventTime"] not in seen[event["brokerName"]]
        seen[event["brokerName"]].add(event["eventTime"])


@pytest.mark.parametrize("disorder_ms", [1000, 5000])
def test_disorder_is_bounded(disorder_ms: int) -> None:
    events = generate_history(3, 10, 5, HOUR, disorder_ms=disorder_ms)
    times = [e["eventTime"] for e in events]
    # no event arrives after one that is more than disorder_ms younger
    suffix_min = times[-1]
    worst = 0
    for t in reversed(times):
        suffix_min = min(suffix_min, t)
        worst = max(worst, t - suffix_min)
    assert 0 < worst <= disorder_ms


def test_fleet_shape() -> None:
    clusters_seen = set()
    for seed in range(12):
        events = generate_history(seed, 9, 3, 60_000, fault_interval_ms=0)
        groups: dict[str, set[tuple[str, int]]] = defaultdict(set)
        clusters = set()
        for event in events:
            groups[event["brokerName"]].add((event["brokerAddr"], event["brokerId"]))
            clusters.add(event["clusterName"])
        assert len(groups) == 9
        for members in groups.values():
            ids = sorted(i for _, i in members)
            assert ids[0] == 0 and 1 <= len(ids) <= 3 and ids == list(range(len(ids)))
        assert 1 <= len(clusters) <= 3
        clusters_seen.add(len(clusters))
    assert clusters_seen == {1, 2, 3}


def test_registration_period_and_heartbeats() -> None:
    period = 20_000
    events = generate_history(2, 3, 4, 10 * period, period_ms=period, fault_interval_ms=0)
    by_addr: dict[str, list[dict]] = defaultdict(list)
    for event in events:
        by_addr[event["brokerAddr"]].append(event)
    for stream in by_addr.values():
        registers = [e["eventTime"] for e in stream if e["eventType"] == "REGISTER"]
        gaps = [b - a for a, b in zip(registers, registers[1:], strict=False)]
        assert gaps and all(period - 300 <= g <= period + 300 for g in gaps)
        assert any(e["eventType"] == "HEARTBEAT" for e in stream)
        assert len(stream[0]["topicConfigTable"]) == 4 + 3  # user topics + system topics


def test_all_fault_kinds_occur() -> None:
    events, faults = long_history()
    assert {f.kind for f in faults} == set(FAULT_KINDS)
    kinds = {e["eventType"] for e in events}
    assert kinds == {"REGISTER", "HEARTBEAT", "UNREGISTER"}
    registers = [e for e in events if e["eventType"] == "REGISTER"]
    # role switch visible in the events: an address registers as master after being a slave
    ids_by_addr: dict[str, list[int]] = defaultdict(list)
    for event in registers:
        ids_by_addr[event["brokerAddr"]].append(event["brokerId"])
    assert any(0 in ids and ids.index(0) > 0 for ids in ids_by_addr.values())
    # topic changes: a group's dataVersion counter moves on; stateVersion bumps on switches
    versions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for event in registers:
        dv = event["dataVersion"]
        versions[event["brokerName"]].add((dv["stateVersion"], dv["counter"]))
    assert any(len(v) > 1 for v in versions.values())
    assert any(max(s for s, _ in v) > 0 for v in versions.values())
    # filter servers set and cleared, sometimes absent; optional fields on some brokers only
    filters = [e.get("filterServerList") for e in registers]
    assert any(f for f in filters) and [] in filters and None in filters
    assert {e.get("enableActingMaster") for e in registers} == {True, False, None}
    timeouts = {e.get("heartbeatTimeoutMillis") for e in registers}
    assert None in timeouts and len(timeouts) > 1


@cache
def _long_history_by_group() -> dict[str, list[Event]]:
    """The long history's events parsed once, by broker group: the fault checks replay one
    group up to many times (parsing them again for each was most of this file's time)."""
    groups: dict[str, list[Event]] = defaultdict(list)
    for event in long_history()[0]:
        groups[event["brokerName"]].append(parse_event(encode_event(event)))
    return dict(groups)


def _group_state(group: str, until: int) -> dict:
    """State(until) of one broker group of the long history (groups evolve independently in
    the reference)."""
    return replay_dump(_long_history_by_group()[group], until)


def _live_addrs(group: str, until: int) -> set[str]:
    return {row["brokerAddr"] for row in _group_state(group, until)["brokerLiveTable"]}


def _timeout_of(events: list[dict], addr: str) -> int:
    for event in events:
        if event["brokerAddr"] == addr and event["eventType"] == "REGISTER":
            return event.get("heartbeatTimeoutMillis", DEFAULT_HEARTBEAT_TIMEOUT_MILLIS)
    return DEFAULT_HEARTBEAT_TIMEOUT_MILLIS


def test_fault_effects_on_the_reference_state() -> None:
    """Crashes expire, restarts do not, role switches swap master and slave."""
    events, faults = long_history()
    checked = defaultdict(int)
    for fault in faults:
        if fault.kind == "crash" and "back after" in fault.detail:
            back = fault.time + int(fault.detail.split()[2])
            assert fault.brokerAddr not in _live_addrs(fault.brokerName, back - 1)
            assert fault.time + _timeout_of(events, fault.brokerAddr) < back
            checked["crash"] += 1
        elif fault.kind == "restart":
            registered_before = any(
                e["brokerAddr"] == fault.brokerAddr
                and e["eventType"] == "REGISTER"
                and e["eventTime"] < fault.time
                for e in events
            )
            if registered_before:
                back = fault.time + int(fault.detail.split()[2])
                assert fault.brokerAddr in _live_addrs(fault.brokerName, back - 1)
                checked["restart"] += 1
        elif fault.kind == "role_switch":
            new_master = fault.detail.split()[0]
            rejoin = next(
                e
                for e in events
                if e["brokerAddr"] == fault.brokerAddr
                and e["eventType"] == "REGISTER"
                and e["eventTime"] > fault.time
            )
            dump = _group_state(fault.brokerName, rejoin["eventTime"])
            addrs = dump["brokerAddrTable"][fault.brokerName]["brokerAddrs"]
            assert addrs["0"] == new_master
            assert addrs[str(rejoin["brokerId"])] == fault.brokerAddr != new_master
            checked["role_switch"] += 1
    assert checked["crash"] and checked["restart"] and checked["role_switch"]


def test_large_registration_size() -> None:
    events = generate_history(1, 1, 20_000, 30_000)
    register = next(e for e in events if e["eventType"] == "REGISTER")
    raw = EventEncoder()(register)
    assert len(register["topicConfigTable"]) == 20_003
    assert 1_500_000 < len(raw) < 64 * 1024 * 1024
    assert parse_event(raw).brokerName == register["brokerName"]


def test_endless_generator_is_lazy() -> None:
    sim = FleetSimulator(1, 4, 2, start_ms=DEFAULT_START_MS)
    stream = sim.events(None)
    first = [next(stream) for _ in range(500)]
    assert len(first) == 500


def test_archive_files_round_trip(tmp_path) -> None:
    stats = simulate(
        None,
        "unused",
        4,
        3,
        30_000,
        9,
        False,
        1800,
        tmp_path,
        start_ms=DEFAULT_START_MS,
        disorder_ms=2000,
        archive_minutes=10,
        progress_s=None,
    )
    files = sorted(tmp_path.glob("*.jsonl.gz"))
    assert files == sorted(stats.files) and len(files) == 3
    expected = lines(generate_history(9, 4, 3, 1_800_000, disorder_ms=2000))
    got = [line for path in files for line in iter_file_lines(path)]
    assert sorted(got) == sorted(expected) and len(got) == stats.events
    for path in files:  # one window of event time per file
        times = [json.loads(line)["eventTime"] for line in iter_file_lines(path)]
        assert max(times) // 600_000 == min(times) // 600_000
    again = tmp_path / "again"
    simulate(
        None,
        "unused",
        4,
        3,
        30_000,
        9,
        False,
        1800,
        again,
        start_ms=DEFAULT_START_MS,
        disorder_ms=2000,
        progress_s=None,
    )
    assert [p.read_bytes() for p in files] == [again.joinpath(p.name).read_bytes() for p in files]


def test_archive_writer_reopens_a_closed_window(tmp_path) -> None:
    with ArchiveWriter(tmp_path, minutes=1) as archive:
        archive.write(DEFAULT_START_MS, b"a")
        archive.write(DEFAULT_START_MS + 120_000, b"b")  # closes the first window
        archive.write(DEFAULT_START_MS + 1, b"c")  # later than the promised bound
    first = archive.files[0]
    assert gzip.decompress(first.read_bytes()) == b"a\nc\n"


def test_line_key() -> None:
    assert line_key(b'{"brokerName":"broker-a","x":1}') == b"broker-a"
    for bad in (b"", b"not json", b"[1]", b'{"brokerName":1}', b"\xff\xfe", b'{"a":1}'):
        assert line_key(bad) is None
