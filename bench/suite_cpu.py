"""Where the test suite's time goes: each test's wall time and the CPU time of every process
the run started (Spark's JVM, spark-submit children, brokers), from a cgroup v1 cpuacct group.

A pytest plugin plus a summary. As root, from the repository root:

    mkdir -p /sys/fs/cgroup/cpuacct/routelake-ci
    sh -c 'echo $$ > /sys/fs/cgroup/cpuacct/routelake-ci/tasks &&
           PYTHONPATH=$PWD PYTEST_ADDOPTS="-p bench.suite_cpu" \\
           ROUTELAKE_CPU_CGROUP=/sys/fs/cgroup/cpuacct/routelake-ci \\
           ROUTELAKE_CPU_TSV=/tmp/suite-cpu.tsv .ci/run'
    .venv/bin/python -m bench.suite_cpu /tmp/suite-cpu.tsv

Every process started inside the shell stays in the group, so a test's CPU is the group's
usage counter after the test minus before it (processes left running between tests, such as
the Kafka broker, are counted where their CPU falls).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest


def _usage_s() -> float:
    group = Path(os.environ["ROUTELAKE_CPU_CGROUP"])
    return int((group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    cpu, wall = _usage_s(), time.monotonic()
    yield
    line = f"{item.nodeid}\t{time.monotonic() - wall:.2f}\t{_usage_s() - cpu:.2f}\n"
    with open(os.environ["ROUTELAKE_CPU_TSV"], "a") as out:
        out.write(line)


def summarize(tsv: Path, top: int = 20) -> str:
    """Totals, then the modules with the most wall time (tests, wall s, CPU s)."""
    modules: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for line in tsv.read_text().splitlines():
        nodeid, test_wall, test_cpu = line.split("\t")
        totals = modules[nodeid.split("::")[0]]
        totals[0] += 1
        totals[1] += float(test_wall)
        totals[2] += float(test_cpu)
    wall = sum(t[1] for t in modules.values())
    cpu = sum(t[2] for t in modules.values())
    lines = [
        f"{sum(int(t[0]) for t in modules.values())} tests: wall {wall:.0f} s, CPU {cpu:.0f} s, "
        f"{cpu / wall:.2f} cores busy on average; CPU / 2 cores = {cpu / 2 / 60:.1f} min",
        "| module | tests | wall s | CPU s |",
        "|---|---|---|---|",
    ]
    ranked = sorted(modules.items(), key=lambda kv: -kv[1][1])[:top]
    lines += [f"| {m} | {int(n)} | {w:.0f} | {c:.0f} |" for m, (n, w, c) in ranked]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1])))
