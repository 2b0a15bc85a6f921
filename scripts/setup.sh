#!/usr/bin/env bash
# One-time set-up (idempotent, fast when already done): .venv with the pinned packages, and the
# Maven Central jars Spark (Delta, Kafka source) and the local Kafka broker need, in .jars/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

# The console's browser tests drive Debian's chromium (browser downloads by other tools cannot
# reach their hosts here). Installed as root (CI is); otherwise say how.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && apt-get install -y -q chromium
  else
    echo "note: no chromium; the browser tests skip. As root: apt-get install -y chromium" >&2
  fi
fi

# The metrics tests check the exposition and the alert rules with promtool and scrape the
# services with a real Prometheus: Debian's prometheus package brings both.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends prometheus
  else
    echo "note: no prometheus; the Prometheus tests skip. As root: apt-get install -y prometheus" >&2
  fi
fi

# A class-data-sharing archive of the classes a Spark session loads, for the tests' Spark
# drivers (tests/conftest.py): measured ~40 % less CPU to start a session (10.9 -> 6.6 CPU-s).
# Tied to this JDK and these jars: rebuilt with them; a JVM that cannot use it runs without it.
cds_archive=.jars/spark-cds.jsa
build_cds_archive() {
  [ -f "$cds_archive" ] && return 0
  SPARK_SUBMIT_OPTS="-XX:ArchiveClassesAtExit=$PWD/$cds_archive -Xlog:cds=off -Xlog:cds+dynamic=off" \
    PYSPARK_PYTHON="$PWD/.venv/bin/python" .venv/bin/python - >/dev/null 2>&1 <<'PY' \
    || { rm -f "$cds_archive"; echo "note: no CDS archive for Spark (tests start slower)" >&2; }
import tempfile
from routing_lib.config import load_config
from routing_lib.spark.session import build_spark
spark = build_spark(load_config(), "cds-archive")
with tempfile.TemporaryDirectory() as tmp:  # a Delta write and read, as the tests do
    spark.range(100).selectExpr("id % 3 AS k").write.format("delta").save(tmp + "/t")
    spark.read.format("delta").load(tmp + "/t").groupBy("k").count().collect()
jvm = spark.sparkContext._gateway.proc  # the JVM writes the archive as it exits: wait for it
spark.stop()
jvm.stdin.close()  # pyspark's JVM exits when its stdin closes
jvm.wait(timeout=600)
PY
}

# `spark-submit jobs/route_state.py` as typed (README): spark-submit starts the driver JVM before
# the jobs' session builder could add the Delta and Kafka jars, so they go in the venv's Spark
# defaults (pyspark's conf/spark-defaults.conf), with the s3a jars on the driver's class path.
# An in-process session passes its own --conf values, which take precedence over these.
write_spark_defaults() {
  local spark_home conf jars s3_jars
  spark_home=$(.venv/bin/python -c "import pyspark, os; print(os.path.dirname(pyspark.__file__))")
  conf="$spark_home/conf/spark-defaults.conf"
  jars=$(ls "$PWD"/.jars/spark/*.jar | paste -sd, -)
  mkdir -p "$spark_home/conf"
  {
    echo "# Written by routelake's scripts/setup.sh (rewritten by each run): the jars the jobs need."
    echo "spark.jars $jars"
    if compgen -G "$PWD/.jars/s3/*.jar" >/dev/null; then
      s3_jars=$(ls "$PWD"/.jars/s3/*.jar | paste -sd: -)
      echo "spark.driver.extraClassPath $s3_jars"
    fi
  } > "$conf.tmp"
  mv "$conf.tmp" "$conf"
}

stamp=.venv/.routelake-setup
want=$(cat pyproject.toml deploy/maven/pom.xml deploy/maven/rocketmq-tools/pom.xml | sha1sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d .jars/spark ] && [ -d .jars/kafka ] \
   && [ -d .jars/rocketmq ] && [ -d .jars/s3 ]; then
  build_cds_archive
  write_spark_defaults
  echo "set-up is current (.venv, .jars)"; exit 0
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[test,plot,uvloop,bench]"
# Scripts reading Delta tables with delta-rs exit 0 (routing_lib/clean_exit.py: a .pth hook).
.venv/bin/python -m routing_lib.clean_exit

# Spark already ships Scala, Hadoop client, lz4, snappy...: keep only the jars it lacks, so
# no second copy of a library sits on the class path.
fetch_jars() {  # profile dest
  local tmp; tmp=$(mktemp -d)
  mvn -q -B -f deploy/maven/pom.xml -P "$1" dependency:copy-dependencies -DoutputDirectory="$tmp"
  rm -rf "$2"; mkdir -p "$2"; cp "$tmp"/*.jar "$2"/; rm -rf "$tmp"
}
fetch_jars spark .jars/spark
pyspark_jars=$(.venv/bin/python -c "import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))")
for jar in .jars/spark/*.jar; do
  stem=$(basename "$jar" | sed -E 's/-[0-9][^-]*\.jar$//')
  if compgen -G "$pyspark_jars/${stem}-[0-9]*" >/dev/null; then rm "$jar"; fi
done
fetch_jars kafka .jars/kafka
# s3a:// for Spark (docs/object-storage.md): hadoop-aws + the AWS SDK bundle (~560 MB), on the
# driver's class path (routing_lib/spark/session.py; opened lazily, no measurable start cost).
fetch_jars s3 .jars/s3
# RocketMQ's own Java client tools (mqadmin) and NameServer: tests and the lookup benchmark.
scripts/fetch_rocketmq.sh
rm -f "$cds_archive"
build_cds_archive
write_spark_defaults
echo "$want" > "$stamp"
echo "set-up done: $(ls .jars/spark | wc -l) Spark jars, $(ls .jars/kafka | wc -l) Kafka jars"
