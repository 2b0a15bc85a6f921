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

# CPU and wall seconds per test module, checked against tests/cpu_budget.toml (its [modules] and
# [wall] budgets; tests/support/cpu_budget.py, which also lists the modules that wait the most;
# ROUTELAKE_WALL_BUDGET_SCALE=N widens the wall budgets on a shared machine; the figures go to
# .work/test-cpu.toml). As root with cgroups writable, this shell and everything it
# starts (Kafka, Spark's JVMs, brokers, daemons) go in a cgroup of their own, read by the plugin;
# otherwise the plugin reads the process tree, and says which it used.
cpu_group=""
cpu_group_parent=""
join_cpu_group() {  # cgroup v1 cpuacct, else v2, under this shell's own group
  local own
  own=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}cpuacct\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup)
  if [ -n "$own" ] && [ -f "/sys/fs/cgroup/cpuacct$own/cpuacct.usage" ]; then
    cpu_group_parent=/sys/fs/cgroup/cpuacct${own%/}
  else
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    [ -n "$own" ] && [ -f "/sys/fs/cgroup${own%/}/cgroup.procs" ] || return 1
    cpu_group_parent=/sys/fs/cgroup${own%/}
  fi
  cpu_group=$cpu_group_parent/routelake-test-$$
  mkdir "$cpu_group" 2>/dev/null && echo $$ >"$cpu_group/cgroup.procs" 2>/dev/null \
    || { rmdir "$cpu_group" 2>/dev/null; cpu_group=""; return 1; }
  export ROUTELAKE_CPU_CGROUP=$cpu_group
}
leave_cpu_group() {  # back to the parent group; the group goes once empty (stragglers keep it)
  [ -n "$cpu_group" ] || return 0
  echo $$ >"$cpu_group_parent/cgroup.procs" 2>/dev/null
  rmdir "$cpu_group"/*/ "$cpu_group" 2>/dev/null || true
}
[ "$(id -u)" = 0 ] && join_cpu_group

started_kafka=0
if [ -x scripts/kafka.sh ]; then
  if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start || { echo "could not start the local Kafka broker" >&2; exit 1; }
    started_kafka=1
  fi
fi
stop_kafka() { [ "$started_kafka" = 1 ] && scripts/kafka.sh stop; }

# "python -m pytest": the repository root on sys.path before the plugin is imported
pytest_run() {  # pytest_run FIGURES BASETEMP ARGS...: one pytest process with the CPU budget
  local figures=$1 basetemp=$2
  shift 2
  .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -p tests.support.cpu_budget \
    --cpu-budget tests/cpu_budget.toml --cpu-figures "$figures" --basetemp "$basetemp" "$@"
}
join_lane_group() {  # this (sub)shell and what it starts: a cgroup of its own under the run's
  [ -n "$cpu_group" ] || return 0
  mkdir -p "$cpu_group/$1" && echo "$BASHPID" >"$cpu_group/$1/cgroup.procs" \
    && export ROUTELAKE_CPU_CGROUP=$cpu_group/$1
}
no_tests_is_failure() {
  if [ "$1" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    return 1
  fi
  return "$1"
}
tmp_root=${TMPDIR:-/tmp}/routelake-test-$$
mkdir -p .work "$tmp_root"
trap 'stop_kafka; leave_cpu_group; rm -rf "$tmp_root"' EXIT

# A selection as asked: one pytest process.
if [ $# -gt 0 ]; then
  pytest_run .work/test-cpu.toml "$tmp_root/main" "$@"
  no_tests_is_failure $?
  exit $?
fi

# The whole suite, in parts (docs/testing.md "The whole suite in parts"): it is CPU-bound inside
# each test and one pytest process keeps ~1.1 of the 2 cores busy, so
# 1. the unit tier (~1 950 tests sharing nothing) in three pytest-xdist processes, as --quick;
# 2. the rest in two lanes side by side: the modules of tests/side_lane.txt (brokers, outages,
#    processes of their own, and in-process Spark modules that share nothing with the others,
#    balanced by wall seconds) in a second pytest process, the others in the main one.
#    ROUTELAKE_TEST_LANES=0: the rest in one process instead (a machine with one core).
# Each part writes its figures; a module's parts are added up and checked against the budgets
# at the end (tests/support/cpu_budget.py merge, check): a part alone may be within them.
parts=(.work/test-cpu-unit.toml .work/test-cpu-main.toml)
rm -f "${parts[@]}" .work/test-cpu-side.toml  # a part that writes none fails the merge
echo "=============== unit tier (pytest -m unit -n 3) ==============="
(join_lane_group unit; pytest_run .work/test-cpu-unit.toml "$tmp_root/unit" -m unit -n 3)
no_tests_is_failure $?
unit_rc=$?

if [ "${ROUTELAKE_TEST_LANES:-1}" = 0 ]; then
  echo "=============== the rest (pytest -m 'not unit') ==============="
  (join_lane_group main; pytest_run .work/test-cpu-main.toml "$tmp_root/main" -m "not unit")
  no_tests_is_failure $?
  main_rc=$?
  side_rc=0
else
  # Each lane has its own cgroup (its CPU figures) and its own basetemp; the side lane's output
  # goes to a file, printed after the main lane's.
  mapfile -t side_lane < <(grep -v '^#' tests/side_lane.txt | grep .)
  ignores=()
  for module in "${side_lane[@]}"; do ignores+=(--ignore "$module"); done
  side_log=.work/test-side-lane.log
  echo "=============== main lane (pytest -m 'not unit', beside the side lane: $side_log) ==============="
  (join_lane_group side; pytest_run .work/test-cpu-side.toml "$tmp_root/side" -m "not unit" \
    "${side_lane[@]}") >"$side_log" 2>&1 &
  side_pid=$!
  (join_lane_group main; pytest_run .work/test-cpu-main.toml "$tmp_root/main" -m "not unit" \
    "${ignores[@]}")
  no_tests_is_failure $?
  main_rc=$?
  wait "$side_pid"
  no_tests_is_failure $?
  side_rc=$?
  echo
  echo "=============== side lane (tests/side_lane.txt, run beside the main lane): $side_log ==============="
  cat "$side_log"
  parts+=(.work/test-cpu-side.toml)
fi

echo
echo "=============== the whole run: figures added up per module, checked against the budgets ==============="
budget_rc=0
if .venv/bin/python -m tests.support.cpu_budget merge "${parts[@]}" --output .work/test-cpu.toml; then
  .venv/bin/python -m tests.support.cpu_budget check .work/test-cpu.toml tests/cpu_budget.toml
  budget_rc=$?
else
  echo "a part wrote no figures (see its output above)" >&2
  budget_rc=1
fi
echo "unit tier exit $unit_rc, main lane exit $main_rc, side lane exit $side_rc, budgets exit $budget_rc (figures: .work/test-cpu.toml)"
[ "$unit_rc" -eq 0 ] && [ "$main_rc" -eq 0 ] && [ "$side_rc" -eq 0 ] && [ "$budget_rc" -eq 0 ]
