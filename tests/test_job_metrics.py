"""The streaming job's metrics (routing_lib/metrics.py): what a published batch adds, the
watermark's lag measured at scrape time, dead letters by kind of reason, the Kafka probe."""

from __future__ import annotations

import socket
from pathlib import Path

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
    assert metrics.get(expiries_total, cluster="", broker="") == 0
    assert metrics.get("routelake_job_dead_letters_total", reason="not_json") == 1
    # the one whose reason was not read is counted all the same
    assert metrics.get("routelake_job_dead_letters_total", reason="invalid_event") == 2
    assert metrics.get("routelake_job_batch_duration_seconds_count") == 2
    assert metrics.get("routelake_job_batch_duration_seconds_sum") == 3.0
    assert metrics.get("routelake_job_batch_phase_duration_seconds_sum", phase="step") == 2.0
    assert metrics.get("routelake_job_freshness_seconds_sum") == 7 + 6


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
