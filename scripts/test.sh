#!/usr/bin/env bash
# The test command: lint, then the whole suite against a real local Kafka broker (started here,
# stopped on exit, also on failure). Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"

.venv/bin/ruff check . || exit 1

started_kafka=0
if [ -x scripts/kafka.sh ]; then
  if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start || { echo "could not start the local Kafka broker" >&2; exit 1; }
    started_kafka=1
  fi
fi
stop_kafka() { [ "$started_kafka" = 1 ] && scripts/kafka.sh stop; }
trap stop_kafka EXIT

.venv/bin/pytest -q -p no:cacheprovider --durations=15 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  rc=1
fi
exit "$rc"
