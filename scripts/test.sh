#!/usr/bin/env bash
# The test command: lint, then the whole suite against a real local Kafka broker (started here,
# stopped on exit, also on failure). Extra arguments go to pytest.
#   scripts/test.sh --quick   the edit-test loop: lint + mypy + the unit tier (pytest -m unit: every
#                             test needing no Spark, Kafka, JVM, browser or child process; tiers
#                             are derived at collection, docs/testing.md "Tiers")
set -uo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# Bytecode caches (git-ignored): without them every pytest run rewrites and compiles each test
# module again, and every child Python (routectl, Spark's workers) compiles the package again.
unset PYTHONDONTWRITEBYTECODE

.venv/bin/ruff check . || exit 1
.venv/bin/ruff format --check . || { echo "run: .venv/bin/ruff format ." >&2; exit 1; }
# the type checker ([tool.mypy] in pyproject.toml): ~1 s with its cache, ~6 s CPU without
.venv/bin/mypy || exit 1

if [ "${1:-}" = "--quick" ]; then
  shift
  # seeded property tests run their first 2 seeds here (each variant once), all in the full suite
  export ROUTELAKE_TEST_SEEDS="${ROUTELAKE_TEST_SEEDS:-2}"
  # pure tests share nothing: three processes (pytest-xdist) keep both cores busy while one
  # waits on a socket or a timer (measured: 2 processes 31 s, 3 processes 29 s, 4: 35 s)
  exec .venv/bin/pytest -q -p no:cacheprovider -m unit -n 3 "$@"
fi

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
