#!/usr/bin/env bash
# The test command: lint, then the whole suite against a real local Kafka broker (started here,
# stopped on exit, also on failure). Extra arguments go to pytest.
#   scripts/test.sh --quick   the edit-test loop: lint + the pure-Python tier (core, schema,
#                             codecs, docs; no Spark, no Kafka, no JVM), about 12 s
set -uo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"

.venv/bin/ruff check . || exit 1
.venv/bin/ruff format --check . || { echo "run: .venv/bin/ruff format ." >&2; exit 1; }
# the type checker ([tool.mypy] in pyproject.toml): ~1 s with its cache, ~6 s CPU without
.venv/bin/mypy || exit 1

if [ "${1:-}" = "--quick" ]; then
  shift
  exec .venv/bin/pytest -q -p no:cacheprovider tests/test_core_golden.py tests/test_schema.py \
    tests/test_history_core.py tests/test_incremental_state.py tests/test_poison_records.py \
    tests/test_lookup_codec.py tests/test_collector_codec.py tests/test_docs_contract.py \
    tests/test_history_docs.py tests/test_packed_pending.py tests/test_known_records.py \
    tests/test_zip_imports.py tests/test_console_data.py tests/test_tls.py \
    tests/test_job_failures.py tests/test_lookup_snapshots.py tests/test_arrow_filters.py \
    tests/test_content_refs.py tests/test_import_cycles.py tests/test_table_catalog.py "$@"
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
