#!/usr/bin/env bash
# spark-submit one of the jobs with the jars fetched at set-up, e.g.
#   deploy/spark-submit.sh jobs/backfill.py --input archive/ --warehouse /data/routes
#   deploy/spark-submit.sh jobs/route_state.py --config conf/prod.toml
# On a cluster (docs/spark-cluster.md): SPARK_MASTER=spark://host:7077, and spark-submit options
# before the job file, e.g. --py-files dist/routelake-0.1.0.zip --conf spark.pyspark.python=...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$root/.venv/bin/python}"
master="${SPARK_MASTER:-local[2]}"
partitions="${SHUFFLE_PARTITIONS:-2}"
# The jobs' session builder would set [spark] master and shuffle_partitions over spark-submit's:
# an empty master keeps spark-submit's, and the partition count is handed over.
export ROUTELAKE_SPARK_MASTER="" ROUTELAKE_SPARK_SHUFFLE_PARTITIONS="$partitions"
# s3a:// warehouses and checkpoints (docs/object-storage.md): hadoop-aws + the AWS SDK bundle on
# the launcher's class path (the session builder cannot add to a JVM spark-submit started).
if compgen -G "$root/.jars/s3/*.jar" >/dev/null; then
  s3_jars=$(ls "$root"/.jars/s3/*.jar | paste -sd: -)
  export SPARK_DIST_CLASSPATH="${SPARK_DIST_CLASSPATH:+$SPARK_DIST_CLASSPATH:}$s3_jars"
fi
jars=$(ls "$root"/.jars/spark/*.jar | paste -sd, -)
exec "$root/.venv/bin/spark-submit" --master "$master" --jars "$jars" \
  --conf spark.sql.shuffle.partitions="$partitions" "$@"
