"""Administrative events through Kafka and `routectl run`, in tiny micro-batches."""

from __future__ import annotations

import pytest

from routing_lib.core.tables import PROGRESS
from tests.helpers import expected_dump, reference_dump
from tests.test_admin_properties import admin_history
from tests.test_streaming_kafka import job, lines_of, produce, rows  # noqa: F401 (fixture)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_delete_topic_fixture_in_tiny_batches(job):  # noqa: F811
    """Fixture 15 (DELETE_TOPIC) read two records per micro-batch gives expected.json."""
    produce(job.bootstrap, job.topic, lines_of("15_delete_topic_admin"))
    assert job(max_offsets_per_trigger=2) == expected_dump("15_delete_topic_admin")
    assert sum(r["late"] for r in rows(job.warehouse, PROGRESS)) == 0


def test_random_admin_history_through_kafka(job):  # noqa: F811
    """A random fleet history with operators' events, 25 records per micro-batch."""
    lines = admin_history(4)
    produce(job.bootstrap, job.topic, [line.encode() for line in lines])
    assert job(max_offsets_per_trigger=25) == reference_dump(lines)
