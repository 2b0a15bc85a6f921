"""The route console's speed in a real browser, on a large warehouse.

    .venv/bin/python -m bench.console_bench --warehouse .work/console-bench
        [--brokers 300 --topics 10000 --minutes 65]

Builds the warehouse once when it is missing (the fleet simulator's archive for `--minutes`
of event time, loaded by `routectl backfill`'s code with Spark), then serves it with the
lookup service (console included) on a thread and drives Debian's chromium with Playwright.
Browser figures come from the page's own clock (performance.now(): navigation start to the
moment the view is drawn, or the time control's change to the redraw):

- fleet view ready (a fresh navigation to `/`), first (cold: the server builds the view) and
  again (the snapshot's cached view);
- a topic search answered (typing to results drawn; the page waits 50 ms after the last key
  before asking: counted) and its request alone;
- a time-travel jump (the slider moved to T; cold: State(T) rebuilt from the history tables);
- a topic's route and timeline (a fresh navigation to `/?topic=NAME`).

Then what each costs on the server: the console's JSON requests timed over HTTP, cold and warm,
and the delta-rs reads behind them (rows and seconds per table).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.backfill_bench import HEARTBEATS_PER_PERIOD, PERIOD_MS, SEED
from routelake_dev.simulator import DEFAULT_START_MS, EventEncoder, iter_history

READY = "main[data-state=ready]"


def build(warehouse: Path, brokers: int, topics: int, minutes: int) -> None:
    from routing_lib.config import load_config
    from routing_lib.jobs.backfill import run_backfill
    from routing_lib.spark.session import build_spark

    archive = warehouse.parent / (warehouse.name + "-archive")
    shutil.rmtree(archive, ignore_errors=True)
    archive.mkdir(parents=True)
    encode = EventEncoder()
    started = time.monotonic()
    count = 0
    with open(archive / "fleet.jsonl", "wb") as out:
        for event in iter_history(
            SEED,
            brokers,
            topics,
            minutes * 60_000,
            PERIOD_MS,
            DEFAULT_START_MS,
            heartbeats_per_period=HEARTBEATS_PER_PERIOD,
        ):
            out.write(encode(event) + b"\n")
            count += 1
    print(f"archive: {count:,} events in {time.monotonic() - started:.0f} s")
    config = load_config()
    spark = build_spark(config, "console-bench")
    started = time.monotonic()
    run_backfill(config, [str(archive)], str(warehouse), spark=spark)
    print(f"backfill: {time.monotonic() - started:.0f} s")
    spark.stop()
    shutil.rmtree(archive)


def table_reads(warehouse: Path) -> list[tuple[str, int, float]]:
    """(table, rows, seconds) of a full delta-rs read of each table the console reads."""
    from routing_lib import storage
    from routing_lib.console.pins import PINNED_TABLES

    out = []
    for table in PINNED_TABLES:
        path = storage.join(str(warehouse), table)
        if not storage.is_dir(storage.join(path, "_delta_log")):
            continue
        started = time.perf_counter()
        rows = storage.open_delta(path).to_pyarrow_table().num_rows
        out.append((table, rows, time.perf_counter() - started))
    return out


def timed_get(client: httpx.Client, path: str) -> tuple[float, Any]:
    started = time.perf_counter()
    response = client.get(path)
    response.raise_for_status()
    return time.perf_counter() - started, response.json()


def server_costs(base: str, at: int, topic: str) -> list[tuple[str, float, float]]:
    """(request, cold s, warm s): the first call builds, the second is served from cache."""
    out = []
    with httpx.Client(base_url=base, timeout=300) as client:
        for path in (
            "/console/api/fleet",
            "/console/api/topics?q=opic12",
            f"/console/api/fleet?at={at}",
            f"/console/api/topics?q=opic12&at={at}",
            f"/console/api/route?topic={topic}",
            f"/console/api/route?topic={topic}&at={at}",
            "/console/api/changes",
            "/console/api/health",
        ):
            cold, _ = timed_get(client, path)
            warm, _ = timed_get(client, path)
            out.append((path, cold, warm))
    return out


def browser_figures(base: str, at: int, topic: str, rounds: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    figures: dict[str, list[float]] = {}

    def note(name: str, ms: float) -> None:
        figures.setdefault(name, []).append(ms)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        ready_at = lambda: float(page.evaluate("document.documentElement.dataset.readyAt"))  # noqa: E731
        for i in range(rounds):
            page.goto(base + "/")
            page.wait_for_selector(READY)
            note("fleet view ready (navigation)", ready_at())
            page.goto(base + "/?view=topics")
            page.wait_for_selector(READY)
            query = ["opic12", "Topic99", "pic5"][i % 3]
            before = float(page.evaluate("performance.now()"))
            page.fill("#topic-search", query)
            page.wait_for_function(
                "q => document.getElementById('topic-results').dataset.query === q", arg=query
            )
            searched = float(page.evaluate("document.documentElement.dataset.searchedAt"))
            note("topic search answered (keys to results, incl. 50 ms debounce)", searched - before)
            note(
                "topic search request + draw",
                float(page.evaluate("document.getElementById('search-summary').dataset.ms")),
            )
            page.goto(base + "/")
            page.wait_for_selector(READY)
            target = at - i * 60_000  # a new T each round: State(T) is built, not cached
            before = float(page.evaluate("performance.now()"))
            page.locator("#at-slider").fill(str(target))
            page.wait_for_function(
                "t => location.search.includes('at=' + t) && "
                "document.querySelector('main').dataset.state === 'ready'",
                arg=target,
            )
            note("time-travel jump (slider to redraw)", ready_at() - before)
            page.goto(base + f"/?topic={topic}")
            page.wait_for_selector(READY)
            note("topic route + timeline (navigation)", ready_at())
        browser.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warehouse", type=Path, default=Path(".work/console-bench"))
    parser.add_argument("--brokers", type=int, default=300)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=65)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not (args.warehouse / "route_progress").exists():
        build(args.warehouse, args.brokers, args.topics, args.minutes)

    from routing_lib.read.warehouse import load_snapshot
    from tests.support.lookup_support import ServerThread, wait_until

    snapshot = load_snapshot(args.warehouse)
    assert snapshot.watermark is not None
    topics = sorted({r["topic"] for r in snapshot.tables["topic_queue_table"]})
    brokers = len(snapshot.tables["broker_addr_table"])
    print(
        f"warehouse: {brokers} brokers, {len(topics):,} topics, "
        f"{len(snapshot.tables['topic_queue_table']):,} topic routes"
    )
    for table, rows, seconds in table_reads(args.warehouse):
        print(f"  delta-rs read {table}: {rows:,} rows, {seconds:.2f} s")
    at = snapshot.watermark - 20 * 60_000
    topic = next((t for t in topics if t.startswith("Topic1")), topics[0])
    with ServerThread(args.warehouse) as server:
        wait_until(lambda: server.service.holder.current is not None, timeout=600)
        base = f"http://127.0.0.1:{server.service.http_port}"
        figures = browser_figures(base, at, topic, args.rounds)
        costs = server_costs(base, at - 7 * 60_000, topic)
    print("\nin the browser (ms; first round is cold):")
    for name, values in figures.items():
        rounded = ", ".join(f"{v:.0f}" for v in values)
        print(f"  {name}: median {statistics.median(values):.0f} ms  [{rounded}]")
    print("\non the server (HTTP request, cold -> warm):")
    for path, cold, warm in costs:
        print(f"  {path}: {cold * 1000:.0f} ms -> {warm * 1000:.0f} ms")


if __name__ == "__main__":
    main()
