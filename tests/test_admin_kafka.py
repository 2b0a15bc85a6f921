"""Administrative events through Kafka and `routectl run`, in tiny micro-batches."""

from __future__ import annotations

import pytest

from routing_lib.core.tables import PROGRESS
from tests.support.helpers import admin_history, expected_dump, reference_dump
from tests.support.kafka_support import lines_of, produce, rows

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_delete_topic_fixture_in_tiny_batches(job):
    """Fixture 15 (DELETE_TOPIC) read two records per micro-batch gives expected.json."""
    produce(job.bootstrap, job.topic, lines_of("15_delete_topic_admin"))
    assert job(max_offsets_per_trigger=2) == expected_dump("15_delete_topic_admin")
    assert sum(r["late"] for r in rows(job.warehouse, PROGRESS)) == 0


def test_random_admin_history_through_kafka(job):
    """A random fleet history with operators' events, 25 records per micro-batch."""
    lines = admin_history(4)
    produce(job.bootstrap, job.topic, [line.encode() for line in lines])
    assert job(max_offsets_per_trigger=25) == reference_dump(lines)
