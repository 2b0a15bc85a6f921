"""The streaming job's metrics (routing_lib/metrics.py): what a published batch adds, the
watermark's lag measured at scrape time, dead letters by kind of reason, the Kafka probe."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from routing_lib.core.catalog import BROKER_LIVENESS_EVENTS, spec
from routing_lib.core.history import EXPIRED, REGISTERED, UNREGISTERED, event_date
from routing_lib.metrics import JobMetrics, KafkaProbe, dead_letter_kind
from tests.support.writer_support import WriterWarehouse

WATERMARK_MS = 1_700_000_000_000


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_batch_adds_its_counts_phases_and_dead_letters_by_kind():
    metrics = JobMetrics(clock=Clock(WATERMARK_MS / 1000 + 7))
    counts = {"input_rows": 10, "applied": 6, "late": 1, "expired": 2, "dead_lettered": 3}
    reasons = {"not JSON: Expecting value": 1, "brokerAddr: port 99999 out of range": 1}
    expiries = {("cluster-a", "broker-a"): 1, ("cluster-b", "broker-a"): 1}
    phases = {"step": 2.0, "tables": 0.5}
    metrics.record_batch(WATERMARK_MS, counts, 2.5, phases, reasons, expiries)
    metrics.record_batch(WATERMARK_MS + 1000, {"input_rows": 5, "applied": 5}, 0.5)

    assert metrics.get("routelake_job_batches_total") == 2
    assert metrics.get("routelake_job_input_events_total") == 15
    assert metrics.get("routelake_job_processed_events_total") == 11
    assert metrics.get("routelake_job_late_events_total") == 1
    expiries_total = "routelake_job_broker_expiries_total"
    assert metrics.get(expiries_total, cluster="cluster-a", broker="broker-a") == 1
    assert metrics.get(expiries_total, cluster="cluster-b", broker="broker-a") == 1
    assert not metrics.has(expiries_total, cluster="", broker="")
    assert metrics.get("routelake_job_dead_letters_total", reason="not_json") == 1
    assert metrics.get("routelake_job_dead_letters_total", reason="invalid_event") == 1
    # the one whose reason was not read is counted all the same, as unknown
    assert metrics.get("routelake_job_dead_letters_total", reason="unknown") == 1
    assert metrics.get("routelake_job_batch_duration_seconds_count") == 2
    assert metrics.get("routelake_job_batch_duration_seconds_sum") == 3.0
    assert metrics.get("routelake_job_batch_phase_duration_seconds_sum", phase="step") == 2.0
    assert metrics.get("routelake_job_freshness_seconds_sum") == 7 + 6


def test_events_that_failed_in_the_step_are_dead_letters_too():
    metrics = JobMetrics()
    counts = {"dead_lettered": 1, "failed_in_step": 2}
    reasons = {"not JSON: x": 1, "internal error: KeyError: 'x'": 2}
    metrics.record_batch(WATERMARK_MS, counts, 1.0, dead_letter_reasons=reasons)
    assert metrics.get("routelake_job_dead_letters_total", reason="not_json") == 1
    assert metrics.get("routelake_job_dead_letters_total", reason="internal_error") == 2
    assert not metrics.has("routelake_job_dead_letters_total", reason="unknown")
    assert not metrics.has("routelake_job_dead_letters_total", reason="invalid_event")

    # reasons not read: the step's failures are still counted, under no invented reason
    metrics.record_batch(WATERMARK_MS, counts, 1.0, dead_letter_reasons={})
    assert metrics.get("routelake_job_dead_letters_total", reason="unknown") == 3
    assert not metrics.has("routelake_job_dead_letters_total", reason="invalid_event")


def test_a_missing_sample_is_not_a_zero():
    metrics = JobMetrics()
    metrics.record_batch(WATERMARK_MS, {}, 1.0)
    assert metrics.get("routelake_job_late_events_total") == 0  # exposed, zero
    with pytest.raises(KeyError, match="routelake_job_late_event_total"):
        metrics.get("routelake_job_late_event_total")  # a misspelt name is not a zero
    with pytest.raises(KeyError):
        metrics.get("routelake_job_dead_letters_total", reason="not_json")


def test_batches_before_the_first_event_record_no_freshness_and_no_watermark():
    clock = Clock(WATERMARK_MS / 1000 + 5)
    metrics = JobMetrics(clock=clock)
    metrics.record_batch(0, {}, 1.0)  # batch 0 of a fresh checkpoint: no event yet
    assert metrics.get("routelake_job_batches_total") == 1
    assert metrics.get("routelake_job_freshness_seconds_count") == 0
    assert metrics.get("routelake_job_freshness_seconds_sum") == 0
    assert not metrics.has("routelake_job_watermark_lag_seconds")
    assert not metrics.has("routelake_job_watermark_timestamp_seconds")
    assert metrics.get("routelake_job_last_batch_timestamp_seconds") == WATERMARK_MS / 1000 + 5

    metrics.record_batch(WATERMARK_MS, {}, 1.0)  # the first real watermark
    assert metrics.get("routelake_job_freshness_seconds_count") == 1
    assert metrics.get("routelake_job_freshness_seconds_sum") == 5
    assert metrics.get("routelake_job_watermark_lag_seconds") == 5


def test_the_watermark_lag_grows_between_batches():
    clock = Clock(WATERMARK_MS / 1000 + 5)
    metrics = JobMetrics(clock=clock)
    text = metrics.exposition().decode()
    assert "routelake_job_watermark_lag_seconds" not in text  # nothing published yet
    metrics.record_batch(WATERMARK_MS, {}, 1.0)
    assert metrics.get("routelake_job_watermark_lag_seconds") == 5
    clock.now += 60  # no batch for a minute: the routes are a minute further behind
    assert metrics.get("routelake_job_watermark_lag_seconds") == 65
    assert metrics.get("routelake_job_watermark_timestamp_seconds") == WATERMARK_MS / 1000
    assert metrics.get("routelake_job_last_batch_timestamp_seconds") == WATERMARK_MS / 1000 + 5


def test_dead_letter_reasons_become_a_few_kinds():
    assert dead_letter_kind("not UTF-8: 'utf-8' codec can't decode") == "not_utf8"
    assert dead_letter_kind("empty record") == "empty"
    assert dead_letter_kind("not a JSON object but list") == "not_object"
    assert dead_letter_kind("internal error: KeyError: 'x'") == "internal_error"
    assert (
        dead_letter_kind("eventTime 9 is more than 5 ms ahead of the job's clock 1 (clock skew)")
        == "future_event_time"
    )
    assert dead_letter_kind("eventType: missing") == "invalid_event"


def test_the_kafka_probe_tells_a_listening_server_from_none():
    metrics = JobMetrics()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        probe = KafkaProbe(f"127.0.0.1:{port}", metrics, interval_s=0.2)
        assert probe.reachable()
    assert not probe.reachable()  # closed: refused
    assert KafkaProbe(f"nowhere:1,127.0.0.1:{port}", metrics).addresses == [
        ("nowhere", 1),
        ("127.0.0.1", port),
    ]


@pytest.mark.parametrize(
    ("server", "address"),
    [
        ("kafka", ("kafka", 9092)),
        (" kafka ", ("kafka", 9092)),
        ("kafka:", ("kafka", 9092)),
        ("kafka:19092", ("kafka", 19092)),
        ("[::1]:19092", ("::1", 19092)),
        ("[::1]", ("::1", 9092)),
        ("::1", ("::1", 9092)),
    ],
)
def test_a_bootstrap_server_without_a_port_is_on_kafkas_default_port(
    server: str, address: tuple[str, int]
):
    assert KafkaProbe(server, JobMetrics()).addresses == [address]


def test_without_history_rows_expiries_are_counted_without_cluster_or_broker():
    metrics = JobMetrics()
    metrics.record_batch(WATERMARK_MS, {"expired": 3}, 1.0, broker_expiries=None)
    metrics.record_batch(WATERMARK_MS, {"expired": 2}, 1.0, broker_expiries={})
    assert metrics.get("routelake_job_broker_expiries_total", cluster="", broker="") == 3


def liveness(cluster: str, broker: str, addr: str, event_type: str, time: int) -> dict[str, object]:
    return {
        "broker_name": broker,
        "cluster_name": cluster,
        "broker_addr": addr,
        "event_time": time,
        "seq": 0,
        "event_type": event_type,
        "broker_id": 0,
        "last_update_timestamp": time - 30_000,
        "heartbeat_timeout_millis": 30_000,
        "deadline": time - 1 if event_type == EXPIRED else None,
        "event_date": event_date(time),
    }


def test_the_writer_counts_the_expiries_it_writes_by_cluster_and_broker(tmp_path: Path):
    warehouse = WriterWarehouse(tmp_path, [spec(BROKER_LIVENESS_EVENTS)])
    writer = warehouse.writer
    t = WATERMARK_MS
    changes = [
        ("append", liveness("cluster-a", "broker-a", "10.0.0.1:10911", EXPIRED, t)),
        ("append", liveness("cluster-a", "broker-a", "10.0.0.2:10911", EXPIRED, t)),
        ("append", liveness("cluster-a", "broker-b", "10.0.0.3:10911", EXPIRED, t + 1)),
        ("append", liveness("cluster-b", "broker-a", "10.1.0.1:10911", EXPIRED, t + 2)),
        ("append", liveness("cluster-a", "broker-a", "10.0.0.1:10911", REGISTERED, t + 3)),
        ("append", liveness("cluster-a", "broker-b", "10.0.0.3:10911", UNREGISTERED, t + 4)),
    ]
    warehouse.merge(BROKER_LIVENESS_EVENTS, changes, batch=0)
    assert writer.broker_expiries == {
        ("cluster-a", "broker-a"): 2,
        ("cluster-a", "broker-b"): 1,
        ("cluster-b", "broker-a"): 1,
    }

    # The batch replayed after a crash: its rows are in, nothing is written or counted again.
    writer.broker_expiries = {}
    warehouse.merge(BROKER_LIVENESS_EVENTS, changes, batch=0)
    assert writer.broker_expiries == {}

    metrics = JobMetrics()
    metrics.record_batch(t, {"expired": 4}, 1.0, broker_expiries={("cluster-a", "broker-a"): 2})
    assert (
        metrics.get("routelake_job_broker_expiries_total", cluster="cluster-a", broker="broker-a")
        == 2
    )
