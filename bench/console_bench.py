"""The route console's speed in a real browser, on a RIP-29-sized warehouse.

    .venv/bin/python -m bench.console_bench [--warehouse /work/bench-data/console-300x10k]
        [--build] [--rounds 5]

The warehouse (300 broker groups x 10 000 topics, 65 minutes of event time) is built by the
real job when it is missing or with `--build` (bench/console_warehouse.py: `routectl
simulate --archive`, then `routectl backfill`). The bench then starts `routectl serve` on it
(its own process, as in production), waits until the lookup serves the snapshot, and drives
Debian's chromium with Playwright. Browser figures come from the page's own clock
(performance.now(): navigation start to the view drawn, keys typed to results drawn, the
time control's change to the redraw):

- fleet view ready: a fresh navigation to `/`;
- topic search answered: typing into the search box to the results drawn (the page waits
  50 ms after the last key: counted), a prefix and a substring query;
- time-travel jump: the slider moved to a new T (State(T) rebuilt from the history tables);
- topic timeline: a fresh navigation to `/?topic=NAME` (route and route history).

Cold is the first of each after the server started (the order is the table's: what an
earlier cold step read stays cached); warm is `--rounds` more with other topics, queries and
times. The server side of each comes from the console's `Server-Timing` header, read in the
browser: the answer's total build time, the delta-rs reads in it (table versions read, and
the Delta logs read to pin the tables to the served batch), and what it built for the
snapshot (fleet, name index, State(T)). Prints a markdown table to paste as is.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.console_warehouse import DEFAULT_WAREHOUSE, Fleet, build, is_built
from tests.support.process_support import free_port

READY = "main[data-state=ready]"
ROWS = {  # figure -> (what the table calls it, the goal in ms or None)
    "fleet": ("fleet view ready (navigation)", 1000),
    "search view": ("search view ready (navigation; the name index, cold)", None),
    "search prefix": ("topic search, prefix (keys to results)", 200),
    "search substring": ("topic search, substring (keys to results)", 200),
    "jump": ("time-travel jump (slider to redraw)", 1500),
    "timeline": ("topic route + timeline (navigation)", 1000),
}
PREFIXES = ["Topic12", "Topic7", "broker-2", "Topic149", "topic33", "cluster-"]
SUBSTRINGS = ["4321", "opic88", "-29", "c999", "1234", "er-1"]
# What the page's fetches cost on the server, from their Server-Timing entries
SERVER_TIMING = """since => performance.getEntriesByType("resource")
  .filter(e => e.name.includes("/console/api/") && e.startTime >= since)
  .map(e => e.serverTiming.map(s => [s.name, s.duration, s.description]))"""


@dataclass
class Figure:
    """One browser measurement and what its requests cost on the server."""

    ms: float
    server: dict[str, tuple[float, int]] = field(default_factory=dict)  # part -> (ms, count)

    def part_ms(self, name: str) -> float:
        return self.server.get(name, (0.0, 0))[0]

    def reads(self) -> int:
        return self.server.get("delta", (0.0, 0))[1]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def warehouse_size(warehouse: Path) -> dict[str, int]:
    """Row counts of the tables the figures depend on, from the Delta tables' file stats."""
    from routing_lib import storage

    counts = {}
    for table in (
        "topic_queue_table",
        "broker_addr_table",
        "broker_live_table",
        "topic_base_changes",  # topic_route_history is derived from these two (issue 36)
        "topic_overlay_changes",
        "broker_liveness_events",
        "broker_membership_history",
    ):
        path = storage.join(str(warehouse), table)
        counts[table] = storage.open_delta(path).to_pyarrow_dataset().count_rows()
    return counts


def topic_names(warehouse: Path) -> list[str]:
    from routing_lib import storage

    data = storage.open_delta(storage.join(str(warehouse), "topic_queue_table"))
    return sorted(data.to_pyarrow_table(columns=["topic"])["topic"].unique().to_pylist())


@contextmanager
def serving(warehouse: Path) -> Iterator[tuple[str, float]]:
    """`routectl serve` on the warehouse: (base URL, seconds until it served the snapshot)."""
    http_port = free_port()
    command = [
        str(Path(sys.executable).with_name("routectl")),
        "serve",
        "--warehouse", str(warehouse),
        "--port", str(free_port()),
        "--http-port", str(http_port),
        "--workers", "1",  # the console is served by the primary alone; no second index
    ]  # fmt: skip
    started = time.monotonic()
    log = warehouse.with_name(warehouse.name + "-serve.log")  # a file: a pipe could fill up
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{http_port}"
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"routectl serve ended, its log: {log.read_text()[-4000:]}")
            try:
                if httpx.get(base + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield base, time.monotonic() - started
    finally:
        process.terminate()
        process.wait(30)


class Browser:
    """One Chromium page; each method measures one action and returns its Figure."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base

    def _now(self) -> float:
        return float(self.page.evaluate("performance.now()"))

    def _server(self, since: float) -> dict[str, tuple[float, int]]:
        parts: dict[str, tuple[float, int]] = {}
        for entries in self.page.evaluate(SERVER_TIMING, since):
            for name, ms, desc in entries:
                total, count = parts.get(name, (0.0, 0))
                parts[name] = (total + ms, count + (int(desc) if desc.isdigit() else 1))
        return parts

    def _ready_at(self) -> float:
        return float(self.page.evaluate("document.documentElement.dataset.readyAt"))

    def navigation(self, path: str) -> Figure:
        """A fresh navigation: its start (page time 0) to the view drawn."""
        self.page.goto(self.base + path)
        self.page.wait_for_selector(READY)
        return Figure(self._ready_at(), self._server(0.0))

    def search(self, query: str) -> Figure:
        """Typing `query` into the topic search (already on the search view) to results."""
        self.page.fill("#topic-search", "")
        self.page.wait_for_function(
            "() => document.getElementById('topic-results').dataset.query === ''"
        )
        before = self._now()
        self.page.fill("#topic-search", query)
        self.page.wait_for_function(
            "q => document.getElementById('topic-results').dataset.query === q", arg=query
        )
        done = float(self.page.evaluate("document.documentElement.dataset.searchedAt"))
        return Figure(done - before, self._server(before))

    def jump(self, at: int) -> Figure:
        """The slider moved to `at` (on the fleet view) to the view drawn again."""
        before = self._now()
        self.page.locator("#at-slider").fill(str(at))
        self.page.wait_for_function(
            "t => location.search.includes('at=' + t) && "
            "document.querySelector('main').dataset.state === 'ready'",
            arg=at,
        )
        return Figure(self._ready_at() - before, self._server(before))


def measure(
    base: str, topics: list[str], rounds: int
) -> tuple[dict[str, list[Figure]], tuple[int, int]]:
    """(name -> [cold Figure, warm Figures...], the history's span the page offers)."""
    from playwright.sync_api import sync_playwright

    rng = random.Random("console-bench")
    user_topics = [t for t in topics if t.startswith("Topic")] or topics
    picked = rng.sample(user_topics, rounds + 1)
    figures: dict[str, list[Figure]] = {name: [] for name in ROWS}
    span = (0, 0)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        b = Browser(page, base)
        for i in range(rounds + 1):  # round 0: the first of each after the server started
            figures["fleet"].append(b.navigation("/"))
            if i == 0:  # the time control's range: the history's start to the watermark
                bounds = page.evaluate(
                    "() => [document.getElementById('at-slider').min, "
                    "document.getElementById('at-slider').max]"
                )
                span = (int(bounds[0]), int(bounds[1]))
            figures["timeline"].append(b.navigation(f"/?topic={picked[i]}"))
            figures["search view"].append(b.navigation("/?view=topics"))
            figures["search prefix"].append(b.search(PREFIXES[i % len(PREFIXES)]))
            figures["search substring"].append(b.search(SUBSTRINGS[i % len(SUBSTRINGS)]))
            b.navigation("/")
            # a new T each round, 30 % to 75 % into the history: State(T) is built anew
            figures["jump"].append(b.jump(span[0] + (span[1] - span[0]) * (30 + 9 * i) // 100))
        browser.close()
    return figures, span


def summary(figures: dict[str, list[Figure]]) -> list[str]:
    """The markdown table: browser ms (cold, warm median / max) and server cost."""

    def server(f: Figure) -> str:
        builds = "+".join(
            f"{p} {f.part_ms(p):.0f}" for p in ("pins", "fleet", "names", "state") if p in f.server
        )
        text = f"{f.part_ms('total'):.0f} (delta-rs {f.part_ms('delta'):.0f}/{f.reads()} reads"
        return text + (f"; {builds}" if builds else "") + ")"

    def goal(ms: int | None) -> str:
        return "-" if ms is None else f"<= {ms} ms"

    lines = [
        "| in the browser | goal | cold | warm median | warm max | server ms cold "
        "(delta-rs ms/reads; builds) | server ms warm median (delta-rs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, values in figures.items():
        cold, warm = values[0], values[1:] or values
        warm_ms = [f.ms for f in warm]
        warm_server = statistics.median(f.part_ms("total") for f in warm)
        warm_delta = statistics.median(f.part_ms("delta") for f in warm)
        lines.append(
            f"| {ROWS[name][0]} | {goal(ROWS[name][1])} | {cold.ms:.0f} ms | "
            f"{statistics.median(warm_ms):.0f} ms | {max(warm_ms):.0f} ms | {server(cold)} | "
            f"{warm_server:.0f} ({warm_delta:.0f}) |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warehouse", type=Path, default=DEFAULT_WAREHOUSE)
    parser.add_argument("--build", action="store_true", help="build the warehouse anew")
    parser.add_argument("--rounds", type=int, default=5, help="warm rounds after the cold one")
    parser.add_argument("--brokers", type=int, default=Fleet.brokers, help="with a build")
    parser.add_argument("--topics", type=int, default=Fleet.topics, help="with a build")
    parser.add_argument("--minutes", type=int, default=Fleet.minutes, help="with a build")
    args = parser.parse_args()
    if args.build or not is_built(args.warehouse):
        started = time.monotonic()
        build(args.warehouse, Fleet(args.brokers, args.topics, args.minutes))
        print(f"warehouse built in {time.monotonic() - started:.0f} s (load {load()})")

    started = time.monotonic()
    size = warehouse_size(args.warehouse)
    topics = topic_names(args.warehouse)
    load_before = load()
    with serving(args.warehouse) as (base, start_s):
        figures, span = measure(base, topics, args.rounds)
    minutes = (span[1] - span[0]) / 60_000
    print(
        f"\nWarehouse {args.warehouse}: {size['broker_addr_table']} brokers "
        f"({size['broker_live_table']} live), {len(topics):,} topics, "
        f"{size['topic_queue_table']:,} topic routes; history: "
        f"{size['topic_base_changes']:,} base change rows, "
        f"{size['topic_overlay_changes']:,} overlay change rows, "
        f"{size['broker_liveness_events']:,} liveness events, "
        f"{size['broker_membership_history']:,} membership rows; "
        f"event time {minutes:.0f} min. `routectl serve` served it after {start_s:.0f} s. "
        f"{args.rounds} warm rounds. Load average (1/5/15 min) before {load_before}, "
        f"after {load()}; bench {time.monotonic() - started:.0f} s.\n"
    )
    print("\n".join(summary(figures)))


if __name__ == "__main__":
    main()
