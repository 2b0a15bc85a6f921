"""The lookup at RIP-29 scale: snapshot cost, memory, and route latency while snapshots swap.

    .venv/bin/python -m bench.lookup_scale_bench --groups 100 --topics 10000   # 1 M routes
    .venv/bin/python -m bench.lookup_scale_bench --groups 300 --topics 10000   # 3 M routes

1. Writes a warehouse with the job's Delta writer, without Spark (tables with Change Data
   Feed on, tests/support/writer_support.py): `--groups` broker groups (master + slave) with
   `--topics` topics each, drawn from a pool of 1.5 x topics like the fleet simulator
   (`--distinct`: every group its own topics, groups x topics distinct topics). The lookup
   reads topicQueueTable from topic_base + topic_overlay (issue 36): the bench writes those.
2. Starts `routectl serve` on it (its own process) and times the first load (start to
   /readyz 200) and its memory (all its processes: RSS summed, which counts a page two
   processes share twice, and PSS summed, which counts it once).
3. Publishes `--batches` small batches, one every `--interval` s, each like a live job's:
   the liveness of every broker, `--changes` topic_base rows upserted, and every 5th batch
   one broker group expiring or coming back: its addresses, its live entries and its one
   topic_overlay row (its 10 000 base rows stay, as the job keeps them). Times each from its
   progress commit to the server answering with its watermark. `--base-change N`: every Nth
   batch also changes every topic_base row of one group (its perm 6 -> 4, the next time back:
   a broker turned read-only re-registering its table), a base change of `--topics` topics.
4. Meanwhile one client process sends GET_ROUTEINFO_BY_TOPIC (105) for random topics, one at
   a time on one connection, and records every latency.
Prints the figures, the last line the summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.lookup_bench import free_port, serve_argv
from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY
from routing_lib.core.fact_rows import overlay_row
from routing_lib.core.overlay import ABSENT, TRIVIAL
from routing_lib.core.tables import BROKER_ADDR, BROKER_LIVE, CLUSTER_ADDR, TOPIC_QUEUE, Row
from routing_lib.remoting.protocol import RequestCode
from tests.support.lookup_support import RemotingClient
from tests.support.snapshot_support import Change, fleet, one_per_key, queue, upserts
from tests.support.writer_support import WriterWarehouse

REPO = Path(__file__).resolve().parents[1]


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (the zygote and the lookup's worker processes)."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        children = []
    return [pid, *(p for c in children for p in _tree(c))]


def _field_kb(path: str, field: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its descendants, summed (a shared page counts once per
    process that maps it)."""
    return sum(_field_kb(f"/proc/{p}/status", "VmRSS:") for p in _tree(pid)) / 1024


def tree_pss_mb(pid: int) -> float:
    """Proportional set size of `pid` and its descendants, summed: a page shared by n
    processes counts 1/n in each, so the sum counts it once."""
    return sum(_field_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in _tree(pid)) / 1024


def _per_mapping_kb(pid: int, fields: tuple[str, ...]) -> dict[str, int]:
    """Per mapped file of `pid` (anonymous mappings as [anon], [heap], [stack]...): the sum of
    these smaps fields, in kB."""
    kb: dict[str, int] = {}
    name = ""
    try:
        for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
            head = line.split()
            if head and "-" in head[0] and ":" not in head[0]:
                name = Path(head[5]).name if len(head) > 5 else "[anon]"
            elif head and head[0] in fields:
                kb[name] = kb.get(name, 0) + int(head[1])
    except OSError:
        pass
    return kb


def mapping_rss_kb(pid: int) -> dict[str, int]:
    """Per mapped file of `pid`: its resident kB, shared pages included (what VmRSS counts)."""
    return _per_mapping_kb(pid, ("Rss:",))


def rss_growth(before: dict[int, dict[str, int]], pid: int) -> list[str]:
    """Per process of the tree: the mappings whose resident memory grew since `before` (the
    same processes' `mapping_rss_kb` after the load): what the RSS adds, by mapping."""
    lines = []
    for p in _tree(pid):
        now, then = mapping_rss_kb(p), before.get(p, {})
        growth = {n: now.get(n, 0) - then.get(n, 0) for n in {*now, *then}}
        top = sorted(growth.items(), key=lambda kv: -abs(kv[1]))[:8]
        lines.append(
            f"  pid {p}: RSS {sum(growth.values()) / 1024:+.1f} MB since the load: "
            + ", ".join(f"{n} {kb / 1024:+.1f}" for n, kb in top if abs(kb) >= 512)
        )
    return lines


def memory_detail(pid: int) -> list[str]:
    """Per process of the tree: what its PSS is made of (smaps_rollup), and its largest
    private mappings (smaps): where a worker's own memory goes."""
    lines = []
    for p in _tree(pid):
        fields = {}
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines()[1:]:
                name, value = line.split(":", 1)
                fields[name] = int(value.split()[0]) // 1024
        except OSError:
            continue
        lines.append(
            f"  pid {p}: "
            + ", ".join(
                f"{k} {fields.get(k, 0)}"
                for k in (
                    "Rss",
                    "Pss",
                    "Shared_Clean",
                    "Shared_Dirty",
                    "Private_Clean",
                    "Private_Dirty",
                    "Anonymous",
                )
            )
            + " MB"
        )
        private = _per_mapping_kb(p, ("Private_Clean:", "Private_Dirty:"))
        top = sorted(private.items(), key=lambda kv: -kv[1])[:6]
        lines.append(
            "    private: " + ", ".join(f"{Path(n).name} {kb // 1024} MB" for n, kb in top)
        )
    return lines


def http_get(port: int, path: str) -> tuple[int, dict[str, str]]:
    """Status and headers (names lower-cased)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}
    except OSError:
        return 0, {}


def client_loop(port: int, topics: list[str], stop, out) -> None:
    """Requests until `stop` is set (after the last batch is served: however long the
    batches take to commit on a loaded machine, the client sees every one)."""
    rng = random.Random(1)
    client = RemotingClient(port, timeout_s=30)
    latencies, errors, missing = [], 0, 0
    while not stop.is_set():
        topic = rng.choice(topics)
        t0 = time.perf_counter()
        response = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)
        latencies.append(time.perf_counter() - t0)
        missing += response.code == 17  # TOPIC_NOT_EXIST: its only group expired
        errors += response.code not in (0, 17)
    client.close()
    out.send((latencies, errors, missing))


def batch_changes(
    rng: random.Random, rows: dict[str, list[Row]], step: int, changes: int, away: dict
) -> dict[str, list[Change]]:
    """What the job commits for one batch of the group layout: liveness, a few topic_base
    rows, and every 5th batch a group's expiry or return (its broker rows and one overlay
    row; its topic_base rows stay)."""
    out: dict[str, list[Change]] = {
        BROKER_LIVE: [
            ("upsert", {**r, "last_update_timestamp": 1_764_000_000_000 + step})
            for r in rows[BROKER_LIVE]
            if r["broker_name"] not in away
        ]
    }
    topic_rows = rows[TOPIC_QUEUE]
    base: list[Change] = []
    for _ in range(changes):
        row = rng.choice(topic_rows)
        base.append(("upsert", queue(row["topic"], row["broker_name"], rng.choice([4, 8, 16]))))
    if step % 5 == 0:  # a group expires, or the one away comes back
        if away:
            name, gone = away.popitem()
            for table, table_rows in gone.items():
                out.setdefault(table, []).extend(("upsert", r) for r in table_rows)
            out[TOPIC_OVERLAY] = [("upsert", overlay_row(name, TRIVIAL))]
        else:
            name = rng.choice(sorted({r["broker_name"] for r in rows[BROKER_ADDR]}))
            gone = {
                t: [r for r in rows[t] if r["broker_name"] == name]
                for t in (BROKER_ADDR, CLUSTER_ADDR, BROKER_LIVE)
            }
            away[name] = gone
            out[BROKER_LIVE] = [c for c in out[BROKER_LIVE] if c[1]["broker_name"] != name]
            for table, table_rows in gone.items():
                out.setdefault(table, []).extend(("delete", r) for r in table_rows)
            out[TOPIC_OVERLAY] = [("upsert", overlay_row(name, ABSENT))]
    out[TOPIC_BASE] = base
    return out


def base_change(rows: dict[str, list[Row]], group: str, perm: int) -> list[Change]:
    """Every topic_base row of `group` with its perm set to `perm` (queue counts kept): a
    base change of the group's every topic."""
    return [("upsert", {**r, "perm": perm}) for r in rows[TOPIC_QUEUE] if r["broker_name"] == group]


def batch_kind(changes: dict[str, list[Change]], whole_group: bool = False) -> str:
    """plain, or the batch whose overlay row takes a group away (expiry) or brings it back
    (return): a return of a group with its table unchanged, as the job writes it; or (first)
    one whose topic_base changes hold a whole group's rows (base)."""
    if whole_group:
        return "base"
    overlay = changes.get(TOPIC_OVERLAY)
    if not overlay:
        return "plain"
    return "return" if overlay[0][1]["present"] else "expiry"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--topics", type=int, default=10_000, help="topics per group")
    parser.add_argument("--distinct", action="store_true", help="no shared topic pool")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between batches")
    parser.add_argument("--changes", type=int, default=20, help="topic rows per batch")
    parser.add_argument(
        "--base-change",
        type=int,
        default=0,
        metavar="N",
        help="every Nth batch: every topic_base row of one group changes (perm 6 <-> 4)",
    )
    parser.add_argument("--workers", type=int, default=None, help="routectl serve --workers")
    parser.add_argument("--keep", action="store_true", help="keep the warehouse")
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="FILE",
        help="py-spy record the server's processes from the first batch on (collapsed stacks)",
    )
    parser.add_argument(
        "--memory-detail", action="store_true", help="per process: PSS parts, private mappings"
    )
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="lookup-scale-"))
    warehouse = tmp / "warehouse"
    pool = None if args.distinct else args.topics * 3 // 2
    t0 = time.monotonic()
    rows = fleet(args.groups, args.topics, pool=pool)
    wh = WriterWarehouse(warehouse)
    first = upserts({t: rs for t, rs in rows.items() if t != TOPIC_QUEUE})
    wh.publish(0, 1_764_000_000_000, {**first, TOPIC_BASE: upserts(rows)[TOPIC_QUEUE]})
    topics = sorted({r["topic"] for r in rows[TOPIC_QUEUE]})
    print(
        f"warehouse: {args.groups} groups x {args.topics} topics = "
        f"{len(rows[TOPIC_QUEUE]):,} topic routes over {len(topics):,} topics, "
        f"{len(rows[BROKER_ADDR])} brokers (written in {time.monotonic() - t0:.1f} s)",
        flush=True,
    )
    port, http_port = free_port(), free_port()
    argv_serve = serve_argv(warehouse, port, http_port, args.workers)
    log = open(tmp / "serve.log", "wb")
    started = time.monotonic()
    server = subprocess.Popen(argv_serve, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        peak = 0.0
        while http_get(http_port, "/readyz")[0] != 200:
            if server.poll() is not None:
                raise RuntimeError(f"serve exited: {(tmp / 'serve.log').read_text()[-2000:]}")
            peak = max(peak, tree_rss_mb(server.pid))
            time.sleep(0.05)
        ready_s = time.monotonic() - started
        time.sleep(1.0)
        rss_ready, pss_ready = tree_rss_mb(server.pid), tree_pss_mb(server.pid)
        at_load = {p: mapping_rss_kb(p) for p in _tree(server.pid)}
        if args.memory_detail:
            print("\n".join(memory_detail(server.pid)), flush=True)
        print(
            f"first load: ready after {ready_s:.1f} s (process start included), "
            f"RSS {rss_ready:,.0f} MB (peak while loading {max(peak, rss_ready):,.0f} MB), "
            f"PSS {pss_ready:,.0f} MB ({len(_tree(server.pid))} processes)",
            flush=True,
        )

        spy = None
        if args.py_spy is not None:
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "--pid",
                    str(server.pid),
                    "--subprocesses",
                    "--idle",
                ]
                + ["--format", "raw", "--rate", "100", "--output", str(args.py_spy)],
                stdout=subprocess.DEVNULL,
            )
        ctx = mp.get_context("fork")
        parent_end, child_end = ctx.Pipe(duplex=False)
        stop_client = ctx.Event()
        client = ctx.Process(
            target=client_loop, args=(port, topics, stop_client, child_end), daemon=True
        )
        client.start()
        rng = random.Random(7)
        away: dict[str, dict[str, list[Row]]] = {}
        served_after, build_s = [], []
        by_kind: dict[str, list[float]] = {"plain": [], "expiry": [], "return": [], "base": []}
        # the group whose base --base-change flips: the last one (expiries pick at random)
        flip_group, flip_perm = f"broker-{args.groups - 1}", 4
        time.sleep(1.0)
        for step in range(1, args.batches + 1):
            due = time.monotonic() + args.interval
            watermark = 1_764_000_000_000 + step * 1000
            changes = batch_changes(rng, rows, step, args.changes, away)
            whole_group = bool(args.base_change) and step % args.base_change == 0
            if whole_group:
                changes[TOPIC_BASE] = [
                    *changes[TOPIC_BASE],
                    *base_change(rows, flip_group, flip_perm),
                ]
                flip_perm = 6 if flip_perm == 4 else 4
            for table, table_changes in changes.items():
                wh.merge(table, one_per_key(table, table_changes), step)
            wh.progress(step, watermark)
            committed = time.monotonic()
            while True:
                status, headers = http_get(http_port, "/healthz")
                if headers.get("x-routelake-watermark") == str(watermark):
                    break
                if time.monotonic() - committed > 120:
                    raise RuntimeError(f"batch {step} not served after 120 s")
                time.sleep(0.01)
            served_after.append(time.monotonic() - committed)
            by_kind[batch_kind(changes, whole_group)].append(served_after[-1])
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics").read()
            for line in metrics.decode().splitlines():
                if line.startswith("routelake_lookup_snapshot_last_build_duration_seconds "):
                    build_s.append(float(line.split()[1]))
            if step % 10 == 0:  # memory as it goes: growth per batch, or a plateau
                print(
                    f"  after batch {step}: RSS {tree_rss_mb(server.pid):,.0f} MB, "
                    f"PSS {tree_pss_mb(server.pid):,.0f} MB",
                    flush=True,
                )
            time.sleep(max(0.0, due - time.monotonic()))
        time.sleep(1.0)
        stop_client.set()
        latencies, errors, missing = parent_end.recv()
        client.join(10)
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(60)
        rss_end, pss_end = tree_rss_mb(server.pid), tree_pss_mb(server.pid)
        if args.memory_detail:
            print("\n".join(memory_detail(server.pid)), flush=True)
            print("\n".join(rss_growth(at_load, server.pid)), flush=True)
        ms = [x * 1000 for x in latencies]
        print(
            f"{args.batches} batches (liveness of every broker, {args.changes} topic_base rows, "
            f"every 5th a group of {args.topics} topics expiring or returning"
            + (
                f", every {args.base_change}th a group's {args.topics} base rows changing"
                if args.base_change
                else ""
            )
            + "): served "
            f"{statistics.median(served_after):.2f} s after the progress commit (median), "
            f"max {max(served_after):.2f} s (the lookup's change check and poll included); build "
            f"median {statistics.median(build_s) * 1000:.0f} ms, "
            f"max {max(build_s) * 1000:.0f} ms",
            flush=True,
        )
        print(
            "served after the progress commit by batch: "
            + "; ".join(
                f"{kind} median {statistics.median(s):.2f} s, max {max(s):.2f} s ({len(s)})"
                for kind, s in by_kind.items()
                if s
            ),
            flush=True,
        )
        print(
            f"GET_ROUTEINFO_BY_TOPIC during the swaps: {len(ms):,} requests, {errors} errors "
            f"({missing} TOPIC_NOT_EXIST: topics of an expired group), "
            f"p50 {pct(ms, 0.5):.2f} ms, p99 {pct(ms, 0.99):.2f} ms, max {max(ms):.2f} ms; "
            f"at the end RSS {rss_end:,.0f} MB ({rss_end / rss_ready:.2f} x after the load), "
            f"PSS {pss_end:,.0f} MB ({pss_end / pss_ready:.2f} x)",
            flush=True,
        )
        print(
            "reproduce: .venv/bin/python -m bench.lookup_scale_bench "
            + shlex.join(argv if argv is not None else sys.argv[1:])
        )
        print(
            json.dumps(
                {
                    "routes": len(rows[TOPIC_QUEUE]),
                    "ready_s": round(ready_s, 1),
                    "rss_mb": round(rss_ready),
                    "pss_mb": round(pss_ready),
                    "rss_end_mb": round(rss_end),
                    "pss_end_mb": round(pss_end),
                    "served_after_s_median": round(statistics.median(served_after), 2),
                    "served_after_s_max": round(max(served_after), 2),
                    "p99_ms": round(pct(ms, 0.99), 2),
                }
            )
        )
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        if not args.keep:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
        else:
            print(f"kept {tmp}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
