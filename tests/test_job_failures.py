"""What `routectl run` says when its streaming query fails: the cause in one paragraph, from
the error text of each layer that writes or reads (pure Python; the real failures are in
test_fault_disk_full.py and test_fault_kafka_outage.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from routing_lib.spark.failures import JobPlaces, explain


@pytest.fixture
def places(tmp_path: Path) -> JobPlaces:
    (tmp_path / "warehouse").mkdir()
    return JobPlaces(
        str(tmp_path / "warehouse"), str(tmp_path / "checkpoint"), "127.0.0.1:1", "events"
    )


def _java_trace(first: str, lines: int = 200) -> str:
    frames = "\n".join(f"\tat org.apache.spark.Frame{i}.run(Frame.java:{i})" for i in range(lines))
    return f"{first}\n{frames}"


def test_disk_full_in_the_checkpoint_names_the_file_and_the_free_space(places):
    path = f"{places.checkpoint}/offsets/.7.1b2c.tmp"
    error = _java_trace(
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        f"Error writing file:{path}\n"
        "Caused by: java.io.IOException: No space left on device"
    )
    said = explain(error, places)
    assert said.startswith("disk full: no space left on device writing")
    assert places.checkpoint in said and "MiB free of" in said
    assert "restart" in said and "\tat " not in said


def test_disk_full_in_delta_rs_names_the_table(places):
    path = f"{places.warehouse}/topic_queue_table/part-00001-c000.snappy.parquet"
    error = _java_trace(
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
        'call last):\n  File "delta_writer.py", line 190, in _delta_merge\n'
        f"_internal.DeltaError: Generic error: Failed to write {path}: No space left on device "
        "(os error 28)"
    )
    said = explain(error, places)
    assert f"writing {path}" in said


def test_disk_full_in_sparks_offset_log_names_the_offsets_folder(places):
    error = (
        "java.io.IOException: No space left on device\n"
        "\tat org.apache.hadoop.fs.RawLocalFileSystem$LocalFSFileOutputStream.write(x:486)\n"
        "\tat org.apache.spark.sql.execution.streaming.HDFSMetadataLog.write(x:207)\n"
        "\tat org.apache.spark.sql.execution.streaming.MicroBatchExecution.markMicroBatchStart"
        "(MicroBatchExecution.scala:911)\n"
    )
    assert f"writing {places.checkpoint}/offsets (" in explain(error, places)


def test_disk_full_without_a_path_names_warehouse_and_checkpoint(places):
    said = explain(_java_trace("java.io.IOException: No space left on device"), places)
    assert f"under warehouse {places.warehouse} and checkpoint {places.checkpoint}" in said


def test_kafka_timeout_says_kafka_is_unreachable_and_what_to_do(places):
    error = _java_trace(
        "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node "
        "assignment. Call: describeTopics"
    )
    said = explain(error, places)
    assert said.startswith("Kafka at 127.0.0.1:1 (topic events) did not answer in time")
    assert "resumes from its checkpoint" in said


def test_a_task_that_could_not_reach_kafka_is_kafka_too(places):
    error = _java_trace(
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage "
        "30.0 failed 1 times, most recent failure: Lost task 0.0 in stage 30.0 (TID 46): "
        "org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before "
        "the position for partition events-0 could be determined"
    )
    assert explain(error, places).startswith("Kafka at 127.0.0.1:1 (topic events)")


def test_other_failures_keep_sparks_first_line(places):
    said = explain(_java_trace("java.lang.IllegalStateException: something else"), places)
    assert said == "streaming query failed: java.lang.IllegalStateException: something else"
