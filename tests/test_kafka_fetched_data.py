"""The Kafka source's pool of polled records (routing_lib/spark/session.py
KAFKA_FETCHED_DATA_CACHE) lets go of them seconds after a micro-batch, not 5 minutes.

Each task's last poll (every record of it, values included) waits in the pool for a task that
starts where it stopped; Spark's default keeps an idle entry 5 minutes. A fleet's 1 MB
registrations made that ~0.9x of everything read in 5 minutes live in the driver's heap, which
a 500 x 10 000 fleet filled ~3 minutes after its cold start. Here: the job's session and Kafka
options, a topic of 300 KB records read in several micro-batches by two tasks each, then a
count of the ConsumerRecord objects the driver JVM still holds (a class histogram, which runs
a full GC first): none once the pool's timeout and eviction run have passed.
"""

from __future__ import annotations

import os
import subprocess
import time

from pyspark.sql import DataFrame, SparkSession

from routelake_dev.simulator.delivery import make_producer
from routing_lib.spark.session import KAFKA_FETCHED_DATA_CACHE

RECORDS = 60
PER_BATCH = 20
RECORD_CLASS = "org.apache.kafka.clients.consumer.ConsumerRecord"


def _seconds(setting: str) -> float:
    value = KAFKA_FETCHED_DATA_CACHE[setting]
    assert value.endswith("s")
    return float(value[:-1])


def _held_records(spark: SparkSession) -> int:
    """ConsumerRecord objects alive in the driver JVM (jcmd's histogram: live objects only)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    histogram = subprocess.run(
        ["jcmd", str(pid), "GC.class_histogram"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout
    for line in histogram.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[3] == RECORD_CLASS:
            return int(fields[1])
    return 0


def test_polled_records_are_let_go_within_seconds(spark, kafka_bootstrap, topic, tmp_path):
    producer = make_producer(kafka_bootstrap, compression_type=None, acks=1)
    for n in range(RECORDS):
        producer.send(topic, value=str(n).encode() * 100_000)
    producer.flush()
    producer.close()

    counts: list[int] = []

    def each(batch: DataFrame, _batch_id: int) -> None:
        counts.append(batch.count())

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_BATCH))
        .option("minPartitions", "2")  # the job's: two tasks per micro-batch
        .option("kafka.max.partition.fetch.bytes", str(64 * 1024 * 1024))  # the job's
        .load()
        .select("value")
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sum(counts) == RECORDS and len(counts) >= RECORDS // PER_BATCH
    read_at = time.monotonic()

    # an idle entry goes at the first eviction run after its timeout
    limit = _seconds("spark.kafka.consumer.fetchedData.cache.timeout") + _seconds(
        "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval"
    )
    held = _held_records(spark)
    while held and time.monotonic() - read_at < limit + 10:
        time.sleep(1)
        held = _held_records(spark)
    assert held == 0, f"{held} polled records still held {time.monotonic() - read_at:.0f} s after"
