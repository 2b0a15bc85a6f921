"""A local SparkSession with Delta and the Kafka source from the jars fetched at set-up."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from routing_lib.config import Config, project_path


def runtime_jars(config: Config) -> list[str]:
    jars_dir = project_path(config.spark.jars_dir)
    jars = sorted(str(p) for p in jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    if not any("delta-spark" in j for j in jars):
        raise RuntimeError(f"no Delta jars in {jars_dir}: run scripts/setup.sh first")
    return jars


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
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.driver.memory", os.environ.get("ROUTELAKE_DRIVER_MEMORY", "6g"))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ROUTELAKE_SPARK_LOG_LEVEL", "WARN"))
    return spark
