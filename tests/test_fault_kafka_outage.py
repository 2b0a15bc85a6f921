"""Kafka goes away under a running streaming job, on a broker of the tests' own.

Within `[kafka] outage_timeout_s` the job rides the outage out: the Kafka source waits for the
broker and goes on from the offsets in its checkpoint, while the lookup's /readyz reports the
stale watermark. A longer outage stops the job with a message saying Kafka did not answer, and
a restart resumes. Either way the tables end equal to the reference replay of what the topic
holds, with nothing written twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.fault_support import (
    JobProcess,
    LiveFleet,
    OwnBroker,
    ReadyzWatcher,
    assert_matches_reference,
    caught_up,
    published,
    read_topic,
    staleness_bound,
    wait_for,
)
from tests.support.lookup_support import ServerThread

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
# The broker stays down until /readyz reports the stale watermark (at least the staleness bound,
# 15 s or more): the job has then waited on Kafka through many triggers. A fixed 30 s added
# nothing to what the test proves; the outages stay far below outage_timeout_s (300 s).
KILLED_S = 5.0  # a killed broker's outage: the job's 1 s triggers meet it several times
SHORT_PATIENCE_S = "5"  # outage_timeout_s of the job that is to give up
# The jobs' watermark delay: the fleet's disorder is 0.5 s, so 3 s drops nothing as late, and
# each wait for a fresh watermark (first batches, /readyz after a restart, the final watermark)
# is 7 s shorter than with the default 10 s. The reference replay uses the same delay.
WATERMARK_DELAY_MS = 3000
SHORT_DELAY = {"ROUTELAKE_ROUTES_WATERMARK_DELAY_MS": str(WATERMARK_DELAY_MS)}


@pytest.fixture(scope="module")
def broker(config, tmp_path_factory) -> Iterator[OwnBroker]:
    own = OwnBroker(tmp_path_factory.mktemp("own-kafka"), config.kafka)
    own.start()
    try:
        yield own
    finally:
        own.stop()


def test_job_rides_out_a_stopped_and_a_killed_broker(broker, tmp_path):
    topic = broker.create_topic("rides-out")
    with (
        JobProcess(broker.bootstrap, topic, tmp_path) as job,
        LiveFleet(broker.bootstrap, topic) as fleet,
    ):
        job.start(**SHORT_DELAY)
        job.wait_running_until(
            lambda: len(published(job.warehouse)) >= 4, 600, "the job's first batches"
        )
        bound = staleness_bound(job.warehouse)
        with (
            ServerThread(job.warehouse, max_watermark_age_s=bound) as lookup,
            ReadyzWatcher(lookup.service.http_port) as readyz,
        ):
            wait_for(lambda: readyz.last() == 200, 180, "a ready lookup")

            broker.stop()  # a clean shutdown; down until /readyz says so
            down = time.monotonic()
            wait_for(lambda: readyz.last() == 503, bound + 10, "/readyz to report staleness")
            stale_after = time.monotonic() - down
            assert job.process.poll() is None, "the job stopped while Kafka was away:\n" + (
                job.tail()
            )
            broker.start()
            wait_for(lambda: readyz.last() == 200, 180, "fresh routes after the restart")

            broker.kill()
            time.sleep(KILLED_S)
            assert job.process.poll() is None, "the job stopped while Kafka was dead:\n" + (
                job.tail()
            )
            broker.start()
            wait_for(lambda: readyz.last() == 200, 180, "fresh routes after the kill")
            remarks = [remark for _, status, remark in readyz.seen if status == 503]
        fleet.stop()
        assert fleet.errors == [], "the producer lost events"
        lines = read_topic(broker.bootstrap, topic)
        assert len(lines) == fleet.sent  # idempotent producer: each event once, none lost
        wait_for(
            lambda: caught_up(job.warehouse, lines, WATERMARK_DELAY_MS),
            180,
            "the job to publish every event",
        )
        job.stop_cleanly()
    assert_matches_reference(job.warehouse, lines, delay_ms=WATERMARK_DELAY_MS)
    assert stale_after <= bound + 10  # within a few polls of the bound
    assert remarks and all("watermark is" in r for r in remarks), remarks


def test_a_longer_outage_stops_the_job_clearly_and_a_restart_resumes(broker, tmp_path):
    topic = broker.create_topic("gives-up")
    with (
        JobProcess(broker.bootstrap, topic, tmp_path) as job,
        LiveFleet(broker.bootstrap, topic) as fleet,
    ):
        job.start(ROUTELAKE_KAFKA_OUTAGE_TIMEOUT_S=SHORT_PATIENCE_S, **SHORT_DELAY)
        job.wait_running_until(
            lambda: len(published(job.warehouse)) >= 2, 600, "the job's first batches"
        )
        before = len(published(job.warehouse))
        broker.stop()
        code = job.process.wait(180)  # the driver tries its offset lookups 3 times
        said = [line for line in job.log.read_text().splitlines() if line.startswith("routectl")]
        assert code == 1 and said, job.tail()
        assert said[-1].startswith(
            f"routectl run: Kafka at {broker.bootstrap} (topic {topic}) did not answer in time"
        ), said[-1]
        assert "resumes from its checkpoint" in said[-1]
        broker.start()
        job.start(**SHORT_DELAY)
        job.wait_running_until(
            lambda: len(published(job.warehouse)) > before, 600, "the restarted job"
        )
        fleet.stop()
        assert fleet.errors == [], "the producer lost events"
        lines = read_topic(broker.bootstrap, topic)
        assert len(lines) == fleet.sent
        wait_for(
            lambda: caught_up(job.warehouse, lines, WATERMARK_DELAY_MS),
            180,
            "the job to publish every event",
        )
        job.stop_cleanly()
    assert_matches_reference(job.warehouse, lines, delay_ms=WATERMARK_DELAY_MS)
