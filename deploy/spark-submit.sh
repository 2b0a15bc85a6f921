#!/usr/bin/env bash
# spark-submit one of the jobs with the jars fetched at set-up, e.g.
#   deploy/spark-submit.sh jobs/backfill.py --input archive/ --warehouse /data/routes
#   deploy/spark-submit.sh jobs/route_state.py --config conf/prod.toml
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$root/.venv/bin/python}"
# s3a:// warehouses and checkpoints (docs/object-storage.md): hadoop-aws + the AWS SDK bundle on
# the launcher's class path (the session builder cannot add to a JVM spark-submit started).
if compgen -G "$root/.jars/s3/*.jar" >/dev/null; then
  s3_jars=$(ls "$root"/.jars/s3/*.jar | paste -sd: -)
  export SPARK_DIST_CLASSPATH="${SPARK_DIST_CLASSPATH:+$SPARK_DIST_CLASSPATH:}$s3_jars"
fi
jars=$(ls "$root"/.jars/spark/*.jar | paste -sd, -)
exec "$root/.venv/bin/spark-submit" --master "${SPARK_MASTER:-local[2]}" --jars "$jars" \
  --conf spark.sql.shuffle.partitions="${SHUFFLE_PARTITIONS:-2}" "$@"
