"""A local SparkSession with Delta and the Kafka source from the jars fetched at set-up."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from routing_lib import storage
from routing_lib.config import Config, project_path

WORKER_DAEMON = "routing_lib.spark.worker_daemon"


def runtime_jars(config: Config) -> list[str]:
    jars_dir = project_path(config.spark.jars_dir)
    jars = sorted(str(p) for p in jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    if not any("delta-spark" in j for j in jars):
        raise RuntimeError(f"no Delta jars in {jars_dir}: run scripts/setup.sh first")
    return jars


def s3a_classpath(config: Config) -> str:
    """hadoop-aws + the AWS SDK bundle (scripts/setup.sh), for s3a:// warehouses and
    checkpoints. On the driver's class path, not spark.jars: nothing is copied, and opening
    the jars is lazy (no measurable start cost)."""
    s3_dir = project_path(config.spark.jars_dir).parent / "s3"
    return os.pathsep.join(sorted(str(p) for p in s3_dir.glob("*.jar")))


def s3a_conf() -> dict[str, str]:
    """Hadoop S3A settings from the AWS_* environment (credentials: S3A's default provider
    chain reads AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY itself, so no secret is put in the
    Spark conf). A custom endpoint (MinIO, a local test server) gets path-style access."""
    conf = {"spark.hadoop.fs.s3a.endpoint.region": storage.region()}
    url = storage.endpoint()
    if url:
        conf["spark.hadoop.fs.s3a.endpoint"] = url
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(url.startswith("https")).lower()
        # Uploads with "Expect: 100-continue" fail against some S3-compatible servers (moto):
        # off in the sync client, and copyFromLocalFile (RocksDB state files) not through the
        # async transfer manager, which always sends it.
        conf["spark.hadoop.fs.s3a.connection.expect.continue"] = "false"
        conf["spark.hadoop.fs.s3a.optimized.copy.from.local.enabled"] = "false"
    return conf


def daemon_conf(master: str) -> dict[str, str]:
    """A local master's workers fork from a daemon that imported routelake's modules already
    (routing_lib/spark/worker_daemon.py). A cluster's executors keep pyspark's daemon: the
    package may reach them as a --py-files zip, which the daemon could not import."""
    return {"spark.python.daemon.module": WORKER_DAEMON} if master.startswith("local") else {}


# The Kafka source keeps each task's last poll (its whole list of records, values included) in
# a pool, for the next task that starts at the offset where it stopped, and evicts an entry
# only after 5 idle minutes (checked every minute). Only the next micro-batch can start there,
# so older entries are garbage that stays live: a fleet's 1 MB registrations kept the JVM's
# live heap at ~0.9x everything read in the last 5 minutes (a producer at 5 MB/s: 0.87 GB
# after 73 micro-batches, rising; with these settings flat at 0.16-0.18 GB). At 500 x 10 000
# (~37 MB/s of registrations) that filled the 6 GiB heap ~3 minutes after the cold start.
# Seconds still cover the next micro-batch's reuse.
KAFKA_FETCHED_DATA_CACHE = {
    "spark.kafka.consumer.fetchedData.cache.timeout": "10s",
    "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "5s",
}


def build_spark(config: Config, app_name: str = "routelake") -> SparkSession:
    # pandas UDF workers must use this interpreter (the venv's), or pyarrow is missing.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    if config.spark.master:  # "": keep the master spark-submit set (k8s, standalone cluster)
        builder = builder.master(config.spark.master)
    builder = (
        builder.appName(app_name)
        .config("spark.jars", ",".join(runtime_jars(config)))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.shuffle.partitions", str(config.spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        # Cheaper micro-batches, so routes are visible sooner: a state commit uploads the
        # changes only, not a snapshot of every group.
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.driver.memory", os.environ.get("ROUTELAKE_DRIVER_MEMORY", "6g"))
        # The writer brings each micro-batch's rows to the driver in one action
        # (spark/batch_rows.py): a cold start of 300 x 10 000 topics is ~1.1 GB of them, past
        # the 1 GiB default; the driver's memory is the bound.
        .config("spark.driver.maxResultSize", "0")
    )
    for key, value in daemon_conf(config.spark.master).items():
        builder = builder.config(key, value)
    for key, value in KAFKA_FETCHED_DATA_CACHE.items():
        builder = builder.config(key, value)
    classpath = s3a_classpath(config)
    if classpath:
        builder = builder.config("spark.driver.extraClassPath", classpath)
        for key, value in s3a_conf().items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ROUTELAKE_SPARK_LOG_LEVEL", "WARN"))
    return spark
