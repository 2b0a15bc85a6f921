"""The lookup's build of a base change of many topics, in one process, without a server.

    .venv/bin/python -m bench.base_change_build --groups 300 --topics 10000 --cycles 6

Writes a `--groups` x `--topics` warehouse (every group its own topics) with the job's Delta
writer, loads the lookup's index, then alternates: a batch whose topic_base changes hold
every row of one group (perm 6 -> 4, the next time back: `--topics` topics change, as when a
broker turned read-only re-registers its table), then `--plain` batches of a few random rows.
Times, per batch, what the lookup's refresher does (`next_index` and the counts it computes
off the event loop) and the primary's work per snapshot besides: the route risks (its
/metrics scrape) and the console's per-group write counts.
`--check`: each built index compared with one loaded from scratch (topics, counts, routes of
the changed group's topics). `--profile`: cProfile over the base-change builds, the top
functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.lookup_scale_bench import base_change
from routing_lib.console.fleet import WriteCounts
from routing_lib.core.catalog import TOPIC_BASE
from routing_lib.core.tables import TOPIC_QUEUE
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.route_risk import RouteRisks
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.snapshots import load_index, next_index
from routing_lib.read.open_tables import OpenTables
from tests.support.lookup_support import queue
from tests.support.snapshot_support import fleet, upserts
from tests.support.writer_support import WriterWarehouse


def _same(built: RouteIndex, fresh: RouteIndex, topics: list[str]) -> None:
    """Raise unless `built` answers as `fresh` (loaded from scratch) does."""
    checks = {
        "topics": (built.topics, fresh.topics),
        "broker counts": (dict(built.broker_topic_counts), dict(fresh.broker_topic_counts)),
        "route count": (built.route_count, fresh.route_count),
        "routes": (
            [built.route_bytes(t, True) for t in topics],
            [fresh.route_bytes(t, True) for t in topics],
        ),
    }
    for what, (a, b) in checks.items():
        if a != b:
            raise AssertionError(f"the built index differs from a fresh load: {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=300)
    parser.add_argument("--topics", type=int, default=10_000, help="topics per group")
    parser.add_argument("--cycles", type=int, default=6, help="base changes")
    parser.add_argument("--plain", type=int, default=2, help="plain batches after each")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="base-change-"))
    try:
        _run(args, tmp / "warehouse")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _run(args: argparse.Namespace, warehouse: Path) -> None:
    rows = fleet(args.groups, args.topics)
    wh = WriterWarehouse(warehouse)
    t0 = time.monotonic()
    wh.publish(0, 1_764_000_000_000, {**upserts(rows), TOPIC_BASE: upserts(rows)[TOPIC_QUEUE]})
    print(f"warehouse written in {time.monotonic() - t0:.1f} s", flush=True)
    tables = OpenTables(warehouse)
    index = load_index(warehouse, settled_versions(warehouse, tables)[0], tables=tables)
    index.route_count  # noqa: B018 (the refresher computes both off the loop)
    index.broker_topic_counts  # noqa: B018
    risks, write_counts = RouteRisks(), WriteCounts()
    risks.of(index)
    write_counts.of(index.store)
    group, perm, rng = f"broker-{args.groups - 1}", 4, random.Random(3)
    group_topics = [r["topic"] for r in rows[TOPIC_QUEUE] if r["broker_name"] == group]
    times: dict[str, list[tuple[float, float]]] = {"base": [], "plain": []}
    profile = cProfile.Profile() if args.profile else None
    batch = 0
    for _ in range(args.cycles):
        for kind in ["base"] + ["plain"] * args.plain:
            batch += 1
            if kind == "base":
                changes = base_change(rows, group, perm)
                perm = 6 if perm == 4 else 4
            else:
                picked = rng.sample(rows[TOPIC_QUEUE], 20)
                changes = [("upsert", queue(r["topic"], r["broker_name"], 8)) for r in picked]
            wh.merge(TOPIC_BASE, changes, batch)
            wh.progress(batch, 1_764_000_000_000 + batch)
            pinned = settled_versions(warehouse, tables)[0]
            started, cpu = time.perf_counter(), time.process_time()
            if profile is not None and kind == "base":
                profile.enable()
            built = next_index(warehouse, index, pinned, tables=tables)
            built.index.route_count  # noqa: B018 (the refresher computes both off the loop)
            built.index.broker_topic_counts  # noqa: B018
            if profile is not None:
                profile.disable()
            build, build_cpu = time.perf_counter() - started, time.process_time() - cpu
            started, cpu = time.perf_counter(), time.process_time()
            risks.of(built.index)  # the primary's, after each snapshot: route risks
            write_counts.of(built.index.store)  # and the console's per-group counts
            after = time.perf_counter() - started, time.process_time() - cpu
            times[kind].append((build_cpu, after[1]))
            index = built.index
            print(
                f"batch {batch} {kind}: {built.changed_rows} change rows, "
                f"{built.changed_topics} topics, build {build * 1000:.0f} ms "
                f"(CPU {build_cpu * 1000:.0f}), risks + counts {after[0] * 1000:.0f} ms "
                f"(CPU {after[1] * 1000:.0f}), "
                f"delta {index.store.delta_topics} topics",
                flush=True,
            )
            if args.check:
                fresh = load_index(warehouse, pinned, tables=tables)
                _same(index, fresh, group_topics[:: max(1, len(group_topics) // 500)])
    for kind, pairs in times.items():
        builds, scrapes = [b * 1000 for b, _ in pairs], [s * 1000 for _, s in pairs]
        print(
            f"{kind} (CPU time): build median {statistics.median(builds):.0f} ms, "
            f"max {max(builds):.0f} ms; route risks + write counts median "
            f"{statistics.median(scrapes):.0f} ms, max {max(scrapes):.0f} ms ({len(pairs)} batches)"
        )
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    sys.exit(main())
