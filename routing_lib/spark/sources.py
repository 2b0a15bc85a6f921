"""Streaming sources -> classified records (valid events keyed by brokerName, dead letters).

Archives are read with the binaryFile source so that every line keeps its file and line number
(the dead-letter table names them, and they order events that share an eventTime).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from routing_lib import storage
from routing_lib.config import KafkaConfig
from routing_lib.content_files import ContentSettings
from routing_lib.core.content import CONTENT
from routing_lib.ingest import CLOCK_KEY, Classified, archive_records, classify
from routing_lib.spark.admin_log import fan_out_deletes

CLASSIFIED_SCHEMA = (
    "group_key STRING, event_time BIGINT, source STRING, position BIGINT, "
    "payload STRING, raw BINARY, reason STRING"
)
_COLUMNS = ["group_key", "event_time", "source", "position", "payload", "raw", "reason"]
ARCHIVE_GLOB = "*.{jsonl,jsonl.gz}"
CLOCK_FILE = "as-of.clock"
_BINARY_FILE_SCHEMA = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"


def _frame(items: list[Classified]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            (c.group_key, c.event_time, c.source, c.position, c.payload, c.raw, c.reason)
            for c in items
        ],
        columns=_COLUMNS,
    )


def _local_path(uri: str) -> str:
    return uri.removeprefix("file://").removeprefix("file:")


def _archive_bytes(uri: str) -> bytes:
    """An archive file's bytes, read by the Python worker from the path the file source
    listed: shipped as the source's content column, the JVM read each file into its rows and
    copied it through Arrow into the worker (325 MB for the 60 x 8 000 backfill)."""
    return storage.read_bytes(uri if storage.is_remote(uri) else _local_path(uri))


def _classify_archives(
    frames: Iterable[pd.DataFrame],
    warehouse: str | None = None,
    max_future_skew_ms: int | None = None,
    store: ContentSettings | None = None,
) -> Iterator[pd.DataFrame]:
    """`max_future_skew_ms`: lines dated further ahead of the wall clock (read as each file is
    classified) are dead letters; None trusts every eventTime (synthetic archives). The
    frames name the files by path only (archive_stream): each is read here."""
    for pdf in frames:
        for uri in pdf["path"]:
            path = _local_path(uri)
            content = _archive_bytes(uri)
            if path.endswith(CLOCK_FILE):  # the as-of tick: "<eventTime>" in a file of its own
                yield _frame([Classified(CLOCK_KEY, int(content), path, 0, None, None, None)])
                continue
            now_ms = None if max_future_skew_ms is None else int(time.time() * 1000)
            records = archive_records(path, bytes(content), now_ms, max_future_skew_ms or 0, store)
            items = fan_out_deletes(list(records), warehouse)
            for start in range(0, len(items), 10_000):
                yield _frame(items[start : start + 10_000])


def archive_stream(
    spark: SparkSession,
    paths: list[str],
    max_files_per_trigger: int | None = None,
    warehouse: str | None = None,
    max_future_skew_ms: int | None = None,
    store: ContentSettings | None = None,
) -> DataFrame:
    """`.jsonl`/`.jsonl.gz` files or folders of them (searched recursively). With the job's
    warehouse, DELETE_TOPIC events are fanned out to the groups holding the topic. Lines more
    than `max_future_skew_ms` ahead of the wall clock are dead letters (None: no check)."""
    streams = []
    for path in paths:
        reader = spark.readStream.format("binaryFile").schema(_BINARY_FILE_SCHEMA)
        path = storage.spark_uri(path if storage.is_remote(path) else Path(path).resolve())
        if storage.is_dir(path):
            reader = reader.option("recursiveFileLookup", "true")
            reader = reader.option("pathGlobFilter", ARCHIVE_GLOB)
        else:
            # The file source reads folders: read the file's folder, filtered to its name.
            path, name = path.rsplit("/", 1)
            reader = reader.option("pathGlobFilter", _glob_escape(name))
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
        # the path only: the file source then leaves the files unread (_archive_bytes)
        streams.append(reader.load(path).select("path"))
    merged = streams[0]
    for other in streams[1:]:
        merged = merged.unionByName(other)
    return merged.mapInPandas(
        lambda frames: _classify_archives(frames, warehouse, max_future_skew_ms, store),
        CLASSIFIED_SCHEMA,
    )


def _glob_escape(name: str) -> str:
    return "".join("\\" + ch if ch in "\\{}[]*?," else ch for ch in name)


def make_kafka_classifier(
    max_future_skew_ms: int, warehouse: str | None = None, store: ContentSettings | None = None
) -> Callable[[Iterable[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def classify_kafka(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in frames:
            now_ms = int(time.time() * 1000)
            # the frame's new tables made durable together when it is classified, before any
            # of its references leaves the worker (one round of fsyncs, not one per table)
            with CONTENT.deferred_writes():
                items = [
                    classify(
                        bytes(value) if value is not None else b"",
                        f"{topic}-{partition}",
                        int(offset),
                        now_ms,
                        max_future_skew_ms,
                        store=store,
                    )
                    for value, topic, partition, offset in zip(
                        pdf["value"], pdf["topic"], pdf["partition"], pdf["offset"], strict=True
                    )
                ]
            yield _frame(fan_out_deletes(items, warehouse))

    return classify_kafka


def kafka_stream(
    spark: SparkSession,
    kafka: KafkaConfig,
    max_future_skew_ms: int,
    warehouse: str | None = None,
    store: ContentSettings | None = None,
) -> DataFrame:
    outage_ms = int(kafka.outage_timeout_s * 1000)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", kafka.topic)
        .option("startingOffsets", kafka.starting_offsets)
        .option("maxOffsetsPerTrigger", str(kafka.max_offsets_per_trigger))
        .option("failOnDataLoss", "false")
        .option("kafka.max.partition.fetch.bytes", str(64 * 1024 * 1024))
        # A broker that is away for less than this is waited for; then the query stops
        # with the Kafka clients' TimeoutException (routing_lib/spark/failures.py).
        .option("kafka.default.api.timeout.ms", str(outage_ms))
        .option("kafka.request.timeout.ms", str(min(outage_ms, 30_000)))  # may not exceed it
        .option("kafkaConsumer.pollTimeoutMs", str(outage_ms))
    )
    if kafka.min_partitions > 0:
        # several stage-one tasks per batch, each a contiguous range of offsets
        reader = reader.option("minPartitions", str(kafka.min_partitions))
    raw = reader.load()
    return raw.select("value", "topic", "partition", "offset").mapInPandas(
        make_kafka_classifier(max_future_skew_ms, warehouse, store), CLASSIFIED_SCHEMA
    )
