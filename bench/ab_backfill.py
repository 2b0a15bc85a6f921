"""Backfill vs the naive limit over an existing archive, with CPU time: for before/after runs.

    .venv/bin/python -m bench.backfill_bench ...        # once, to generate .work/bench/archive
    git worktree add /tmp/before <commit> && ln -s $PWD/.jars /tmp/before/.jars
    (cd /tmp/before && PYTHONPATH=/tmp/before $OLDPWD/.venv/bin/python \\
        $OLDPWD/bench/ab_backfill.py $OLDPWD/.work/bench/archive /tmp/wh-before before)
    PYTHONPATH=$PWD .venv/bin/python bench/ab_backfill.py .work/bench/archive /tmp/wh-after after

The code under test is whichever tree is first on PYTHONPATH (its `routing_lib` and its
`bench.backfill_bench`), so a worktree of an older commit measures that commit. The naive read
runs twice (the first warms the JVM and the page cache). CPU is the seconds used by this
process and its descendants (the Spark JVM and the Python workers), read from /proc: less
sensitive to other load than wall time. The backfill's CPU is read as it ends, before the
bench reads the warehouse back (until 2026-11-28 it included that check: load_snapshot of
the 60 x 8 000 warehouse, ~1.4 CPU-s).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import routing_lib
from bench.backfill_bench import naive_limit, timed_backfill
from routing_lib.config import load_config
from routing_lib.spark.session import build_spark


def tree_cpu_seconds() -> float:
    """utime + stime (+ reaped children's) of this process and every live descendant."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])
    me, total = os.getpid(), 0
    for pid, used in ticks.items():
        ancestor = pid
        while ancestor not in (0, me) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == me:
            total += used
    return total / os.sysconf("SC_CLK_TCK")


def main() -> None:
    archive, warehouse, label = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    print(f"{label}: code from {routing_lib.__file__}")
    count = sum(1 for path in archive.iterdir() for _ in path.open("rb"))
    config = load_config()
    spark = build_spark(config, "ab-backfill")
    naive_limit(spark, archive)  # warm-up
    started = tree_cpu_seconds()
    naive_s, _ = naive_limit(spark, archive)
    naive_cpu = tree_cpu_seconds() - started
    shutil.rmtree(warehouse, ignore_errors=True)
    started = tree_cpu_seconds()
    ended: list[float] = []  # the CPU as the backfill ends, not after its check reads it back
    backfill_s = timed_backfill(
        config, archive, warehouse, spark, count, label, lambda: ended.append(tree_cpu_seconds())
    )
    backfill_cpu = ended[0] - started
    spark.stop()
    print(
        f"{label}: {count} events, naive {naive_s:.1f} s ({naive_cpu:.1f} CPU s), backfill "
        f"{backfill_s:.1f} s ({backfill_cpu:.1f} CPU s)\n"
        f"ratio backfill/naive (events/s): {naive_s / backfill_s:.3f} "
        f"(CPU: {naive_cpu / backfill_cpu:.3f})"
    )


if __name__ == "__main__":
    main()
