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

# CPU per test module, checked against tests/cpu_budget.toml (tests/support/cpu_budget.py; the
# figures go to .work/test-cpu.toml). As root with cgroups writable, this shell and everything it
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
  rmdir "$cpu_group" 2>/dev/null || true
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
trap 'stop_kafka; leave_cpu_group' EXIT

# "python -m pytest": the repository root on sys.path before the plugin is imported
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -p tests.support.cpu_budget \
  --cpu-budget tests/cpu_budget.toml --cpu-figures .work/test-cpu.toml "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  rc=1
fi
exit "$rc"
