"""bench/partition_lookup.py's arithmetic: which instants a partition's "gone" and "back" are
timed from (the poll against a running lookup is exercised by the stream bench itself)."""

from __future__ import annotations

from bench.partition_lookup import LookupWatch

WALL_START_MS = 1_000_000
START_MS, END_MS = WALL_START_MS + 180_000, WALL_START_MS + 330_000


def _watch() -> LookupWatch:
    # the bench's monotonic clock read 500.0 at the fleet's event time WALL_START_MS
    return LookupWatch({"g-a", "g-b"}, START_MS, END_MS, 500.0, WALL_START_MS)


def _register(
    name: str, addr: str, at_ms: int, timeout_ms: int = 120_000, broker_id: int = 0
) -> dict:
    return {
        "brokerName": name,
        "brokerAddr": addr,
        "brokerId": broker_id,
        "eventType": "REGISTER",
        "eventTime": at_ms,
        "heartbeatTimeoutMillis": timeout_ms,
    }


def test_deadline_is_the_groups_last_broker_timeout_on_the_bench_clock() -> None:
    watch = _watch()
    watch.sent(_register("g-a", "10.0.0.1:10911", START_MS - 20_000))
    watch.sent(_register("g-a", "10.0.0.2:10911", START_MS - 5_000))
    heartbeat = _register("g-a", "10.0.0.1:10911", START_MS - 1_000)
    watch.sent(heartbeat | {"eventType": "HEARTBEAT"})  # refreshes that broker
    # a broker whose timeout outlasts the partition: the group never expires
    watch.sent(_register("g-b", "10.0.0.3:10911", START_MS - 1_000, timeout_ms=600_000))
    watch._deadlines()
    assert watch.groups["g-a"].deadline == 500.0 + (180_000 - 1_000 + 120_000) / 1000
    assert watch.groups["g-b"].deadline is None


def test_back_is_timed_from_kafkas_acknowledgement_of_the_return() -> None:
    watch = _watch()
    watch.sent(_register("g-a", "10.0.0.1:10911", START_MS - 1_000))
    # the slave registers first: it brings no route back (master-only topic configs)
    watch.sent(_register("g-a", "10.0.0.2:10911", END_MS + 1_000, broker_id=1))
    watch.sent(_register("g-a", "10.0.0.1:10911", END_MS + 4_000))  # due at 834.0
    watch.return_acked("g-a", 860.0)  # the fleet was 26 s behind its clock
    watch.return_acked("g-a", 870.0)  # only the first return counts
    group = watch.groups["g-a"]
    group.seen_at, group.gone_at, group.back_at = 600.0, 814.0, 871.5  # as the poll saw it
    report = watch.report()
    # deadline 500 + 299 = 799: gone 15.0 s after it; back 11.5 s after the ack, not 37.5
    assert "1 of 2 cut-off groups past their expiry deadline" in report
    assert "stopped serving them at most 15.0 s after the deadline" in report
    assert "served them again at most 11.5 s after Kafka acknowledged their return" in report
    assert "returns acknowledged at most 26.0 s after their due time" in report


def test_a_group_never_seen_before_its_deadline_is_not_measured() -> None:
    watch = _watch()
    watch.sent(_register("g-a", "10.0.0.1:10911", START_MS - 1_000))
    watch.groups["g-a"].seen_at = 900.0  # the lookup was not ready before the deadline
    assert "0 of 2 cut-off groups" in watch.report()
