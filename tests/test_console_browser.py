"""The route console in a real browser (Debian's chromium driven by Playwright): a person's
clicks on a warehouse backfilled from a golden fixture plus hostile and Unicode names,
checked against `routectl route`, `routectl clusters` and `routectl as-of`."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from routing_lib.cli import main
from routing_lib.core.as_of import as_of
from routing_lib.core.history import BROKER_LIVENESS_EVENTS, EXPIRED, UNREGISTERED
from routing_lib.core.tables import (
    BROKER_ADDR,
    BROKER_LIVE,
    CLUSTER_ADDR,
    FILTER_SERVER,
    LATE_EVENT,
    TOPIC_QUEUE,
)
from routing_lib.lookup.route_risk import RouteRisks
from routing_lib.lookup.routes import RouteIndex
from routing_lib.read.history import as_of_dump, load_history
from routing_lib.read.warehouse import load_snapshot
from tests.support.helpers import fixture_lines, write_files
from tests.support.lookup_support import (
    ServerThread,
    Warehouse,
    addr,
    arrow_schema,
    live,
    queue,
    wait_until,
)

pytestmark = [pytest.mark.browser, pytest.mark.spark]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip(
        "no chromium binary: scripts/setup.sh installs Debian's chromium when run as root",
        allow_module_level=True,
    )
from playwright import sync_api  # noqa: E402  (a test extra: its absence is an error)

XSS_GROUP = "<img src=x onerror=alert(1)>"
XSS_CLUSTER = "\"'><script>alert(2)</script>"
XSS_ADDR = "<img/src=x/onerror=alert(3)>:10911"
UNICODE_GROUP = "брокер-Ünïcødé-😀"
UNICODE_CLUSTER = "集群-ß-✓"
READY = "main[data-state=ready]"


def _register(t: int, cluster: str, group: str, addr: str, topics: list[str]) -> str:
    return json.dumps(
        {
            "eventType": "REGISTER",
            "eventTime": t,
            "clusterName": cluster,
            "brokerAddr": addr,
            "brokerName": group,
            "brokerId": 0,
            "haServerAddr": None,
            "dataVersion": {"stateVersion": 0, "timestamp": t, "counter": 1},
            "topicConfigTable": {
                name: {
                    "topicName": name,
                    "readQueueNums": 4,
                    "writeQueueNums": 4,
                    "perm": 6,
                    "topicSysFlag": 0,
                }
                for name in topics
            },
            "heartbeatTimeoutMillis": 3_600_000,
        },
        ensure_ascii=False,
    )


def _events(start: int) -> tuple[list[str], list[str]]:
    """(first file, second file): the golden fleet plus named brokers and an operator's
    change; then a record the job dead-letters."""
    first = [
        *fixture_lines("20_random_fleet_seed101"),
        _register(start + 100_000, XSS_CLUSTER, XSS_GROUP, XSS_ADDR, ["XssHome"]),
        _register(start + 101_000, UNICODE_CLUSTER, UNICODE_GROUP, "10.77.0.1:10911", ["Uni"]),
        json.dumps(
            {
                "eventType": "WIPE_WRITE_PERM",
                "eventTime": start + 300_000,
                "requestedBy": "10.0.5.5:40000",
                "brokerName": "broker-a0",
            }
        ),
    ]
    second = ['{"eventType": "REGISTER", "brokerName": "' + XSS_GROUP + '", "topic": "<b>bold</b>"']
    return first, second


def _append_late_event(warehouse: Path, start: int) -> None:
    """A backfill orders its whole input by event time, so nothing in it is late; a late
    event is one the streaming job appends to late_event_table: append one like it does."""
    watermark = load_snapshot(warehouse).watermark
    row = {
        "event_time": start + 50_000,
        "broker_name": "late-group",
        "event_type": "REGISTER",
        "source": "kafka:routelake-events:0",
        "position": 7,
        "payload": _register(start + 50_000, "cluster-late", "late-group", "10.88.0.1:1", []),
        "published_watermark": watermark,
        "seen_at_ms": watermark + 60_000,
        "batch_id": 2,
    }
    data = pa.Table.from_pylist([row], schema=arrow_schema(LATE_EVENT))
    write_deltalake(warehouse / LATE_EVENT, data, mode="append")


@pytest.fixture(scope="module")
def warehouse(spark, config, tmp_path_factory) -> Path:
    from routing_lib.jobs.backfill import run_backfill

    root = tmp_path_factory.mktemp("console")
    start = json.loads(fixture_lines("20_random_fleet_seed101")[0])["eventTime"]
    files = write_files(root / "in", list(_events(start)))
    target = root / "warehouse"
    run_backfill(config, [str(p) for p in files], str(target), spark=spark)
    _append_late_event(target, start)
    return target


@pytest.fixture(scope="module")
def console(warehouse: Path) -> Iterator[str]:
    with ServerThread(warehouse) as server:
        base = f"http://127.0.0.1:{server.service.http_port}"
        wait_until(lambda: server.service.holder.current is not None)
        yield base


@pytest.fixture(scope="module")
def history(warehouse: Path) -> dict[str, list[dict]]:
    return load_history(warehouse)


@pytest.fixture(scope="module")
def watermark(warehouse: Path) -> int:
    value = load_snapshot(warehouse).watermark
    assert value is not None
    return value


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield chromium
        chromium.close()


class Page:
    """One browser tab that records dialogs and console errors."""

    def __init__(self, browser: Any, base: str, shots: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.base = base
        self.shots = shots
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str = "/") -> Any:
        self.page.goto(self.base + path)
        return self.ready()

    def ready(self) -> Any:
        self.page.wait_for_selector(READY)
        return self.page

    def texts(self, selector: str) -> list[str]:
        return self.page.locator(selector).all_inner_texts()

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000
        return path


@pytest.fixture
def page(browser, console, tmp_path) -> Iterator[Page]:
    tab = Page(browser, console, tmp_path)
    yield tab
    tab.page.close()
    assert tab.errors == []


def _cli_json(capsys, *args: str) -> Any:
    capsys.readouterr()
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def _addresses(broker_addr_table: dict) -> set[str]:
    return {a for group in broker_addr_table.values() for a in group["brokerAddrs"].values()}


def _wait_mode(page: Page, text: str) -> None:
    page.page.wait_for_function(
        "t => (document.getElementById('mode') || {}).textContent?.startsWith(t)", arg=text
    )


# -- the views --


def test_fleet_shows_every_broker_of_routectl_clusters(page, warehouse, capsys):
    clusters = _cli_json(capsys, "clusters", "--warehouse", str(warehouse))
    tab = page.open("/")
    assert tab.locator("main").get_attribute("data-view") == "fleet"
    shown = set(page.texts("#fleet-table td.addr"))
    assert shown == _addresses(clusters["brokerAddrTable"])
    groups = {t for t in page.texts("#fleet-table td.group") if t}
    assert groups == set(clusters["brokerAddrTable"])
    counts = page.texts("#counts")[0]
    assert f"{len(clusters['brokerAddrTable'])} broker groups" in counts
    assert page.texts("#mode") == ["live"]
    assert page.texts("#snapshot-version")[0].startswith("snapshot v")
    page.shot("fleet")


def test_search_finds_a_topic_whose_route_equals_routectl_route(page, warehouse, capsys):
    page.open("/")
    page.page.click("#tabs a[data-view=topics]")
    page.ready()
    page.page.fill("#topic-search", "topic2")
    page.page.wait_for_function(
        "() => document.getElementById('topic-results').dataset.query === 'topic2'"
    )
    names = page.texts("#topic-list a")
    assert "Topic28" in names and all("topic2" in n.casefold() for n in names)
    assert names[0].casefold().startswith("topic2")
    page.page.click("#topic-list a >> text=Topic28")
    page.ready()
    assert "topic=Topic28" in page.page.url
    route = json.loads(page.page.locator("#route-json").text_content())
    assert route == _cli_json(capsys, "route", "Topic28", "--warehouse", str(warehouse))
    assert page.page.locator("#topic-timeline tr.version").count() >= 1
    assert page.page.locator("svg.timeline rect.bar").count() >= 1
    page.shot("topic")


def _time_with_other_state(history: dict, watermark: int) -> int:
    """An event time whose State differs from the final one (a broker was not live yet)."""
    final = as_of(history, watermark)["liveBrokers"]
    lines = fixture_lines("20_random_fleet_seed101")
    times = sorted({json.loads(line)["eventTime"] for line in lines})
    for t in times[len(times) // 3 :]:
        if t <= watermark and as_of(history, t)["liveBrokers"] != final:
            return t
    raise AssertionError("the fixture's state never differs from its final one")


def _live_addresses(state: dict) -> set[str]:
    """Addresses of brokerAddrTable whose (cluster, address) is in brokerLiveTable."""
    live = {(b["clusterName"], b["brokerAddr"]) for b in state["liveBrokers"]}
    return {
        a
        for group in state["brokerAddrTable"].values()
        for a in group["brokerAddrs"].values()
        if (group["cluster"], a) in live
    }


def test_moving_the_time_control_shows_as_of_t(page, warehouse, history, watermark):
    at = _time_with_other_state(history, watermark)
    expected = as_of_dump(warehouse, at)  # what `routectl as-of --at T` prints
    page.open("/")
    page.page.locator("#at-slider").fill(str(at))
    _wait_mode(page, "as of")
    page.ready()
    assert f"at={at}" in page.page.url
    assert set(page.texts("#fleet-table td.addr")) == _addresses(expected["brokerAddrTable"])
    live_rows = page.texts("#fleet-table tr.broker:not(.dead) td.addr")
    assert set(live_rows) == _live_addresses(expected)
    assert _live_addresses(expected) != _live_addresses(as_of(history, watermark))
    page.shot("fleet-at-t")
    page.page.click("#tabs a[data-view=topics]")
    page.ready()
    topics = sorted(expected["topicQueueTable"], key=str.casefold)
    assert page.texts("#search-summary")[0].startswith(f"{len(topics)} topics")
    assert page.texts("#topic-list a") == topics[:100]
    assert f"at={at}" in page.page.url
    page.page.click("#live")
    _wait_mode(page, "live")


def test_a_linked_at_url_opens_at_t(page, warehouse, history, watermark):
    at = _time_with_other_state(history, watermark)
    expected = as_of_dump(warehouse, at)
    topic = next(t for t in sorted(expected["topicQueueTable"]) if t.startswith("Topic"))
    page.open(f"/?topic={topic}&at={at}")
    _wait_mode(page, "as of")
    assert page.page.locator("#at-slider").input_value() == str(at)
    route = json.loads(page.page.locator("#route-json").text_content())
    queues = {q["brokerName"]: q for q in route["queueDatas"]}
    assert queues == expected["topicQueueTable"][topic]
    assert {b["brokerName"] for b in route["brokerDatas"]} <= set(expected["brokerAddrTable"])
    page.open(f"/?at={at}")
    assert set(page.texts("#fleet-table td.addr")) == _addresses(expected["brokerAddrTable"])


def test_broker_timeline_has_the_liveness_intervals_of_as_of(page, warehouse, history, watermark):
    kinds = {
        e["event_type"] for e in history[BROKER_LIVENESS_EVENTS] if e["broker_name"] == "broker-a0"
    }
    assert {EXPIRED, UNREGISTERED} & kinds
    page.open("/?broker=broker-a0")
    rows = page.page.locator("#liveness tr.interval")
    assert rows.count() >= 2
    live_at = lambda t: as_of(history, t)["liveBrokers"]  # noqa: E731
    ends = set()
    for i in range(rows.count()):
        cluster, addr, start, end, ended_by = rows.nth(i).locator("td").all_inner_texts()
        key = {"clusterName": cluster, "brokerAddr": addr}
        t0 = _ms(start)
        assert key in live_at(t0) and key not in live_at(t0 - 1)
        if end == "(alive)":
            assert key in live_at(watermark)
        else:
            t1 = _ms(end)
            assert key in live_at(t1 - 1) and key not in live_at(t1)
            ends.add(ended_by)
    assert ends and ends <= {EXPIRED, UNREGISTERED, "REJECTED"}
    assert page.page.locator("svg.timeline rect.bar").count() == rows.count()
    page.shot("broker-timeline")


def _ms(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace(" ", "T")).timestamp() * 1000)


def test_hostile_names_render_as_text_and_no_script_runs(page, console):
    response = httpx.get(console + "/")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp
    tab = page.open("/")
    assert XSS_GROUP in page.texts("#fleet-table td.group")
    assert XSS_CLUSTER in page.texts("#fleet-table td.cluster")
    assert XSS_ADDR in page.texts("#fleet-table td.addr")
    assert tab.locator("main img, main script").count() == 0
    page.page.click(f"#fleet-table td.group a >> text={XSS_GROUP}")
    page.ready()
    assert page.texts("#broker-name") == [XSS_GROUP]
    page.open("/?view=health")
    assert "<b>bold</b>" in page.page.locator("#dead-letters").inner_text()
    assert tab.locator("main b, main img").count() == 0
    # The policy itself: an inline script the page did not ship does not run.
    tab.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.inlineRan = true'; document.body.appendChild(s); }"
    )
    assert tab.evaluate("() => window.inlineRan === undefined")
    assert page.dialogs == []
    page.shot("hostile-names")


def test_unicode_names_render_unchanged(page):
    page.open("/")
    assert UNICODE_GROUP in page.texts("#fleet-table td.group")
    assert UNICODE_CLUSTER in page.texts("#fleet-table td.cluster")
    page.open("/?broker=" + httpx.QueryParams({"b": UNICODE_GROUP}).get("b"))
    assert page.texts("#broker-name") == [UNICODE_GROUP]


def test_operators_changes_and_health(page, warehouse):
    page.open("/?view=changes")
    page.page.fill("#filter-fbroker", "broker-a0")
    page.page.click("#changes-filter button")
    page.page.wait_for_url("**fbroker=broker-a0**")
    page.ready()
    rows = page.page.locator("#changes-table tr.change")
    assert rows.count() == 1
    cells = rows.nth(0).locator("td").all_inner_texts()
    assert cells[1] == "WIPE_WRITE_PERM" and cells[2] == "broker-a0"
    assert cells[6] == "10.0.5.5:40000"
    page.open("/?view=health")
    assert page.texts("#late-events h3")[0] == "Late events: 1"
    assert page.page.locator("#late-events td", has_text="late-group").count() == 1
    assert page.texts("#dead-letters h3")[0] == "Dead letters: 1"
    # the route risks, as a RouteRisks of the warehouse's own snapshot finds them
    risk = RouteRisks().of(RouteIndex(load_snapshot(warehouse)))
    unwritable, single = risk.topics_without_writable(), risk.single_group_topics()
    assert page.texts("#risk-unwritable h3")[0] == (
        f"Topics without a writable queue: {len(unwritable)}"
    )
    assert page.texts("#risk-single-group h3")[0] == (
        f"Topics on a single broker group: {len(single)}"
    )
    assert single  # the fleet has some: each links to its timeline
    page.shot("health")
    risks = page.page.locator("#risk-single-group")
    risks.get_by_role("link", name=single[0], exact=True).first.click()
    page.page.wait_for_url(f"**/?{urlencode({'topic': single[0]})}")
    page.ready()
    assert page.texts("#topic-name") == [single[0]]


def test_an_empty_warehouse_shows_no_data_yet(browser, tmp_path):
    with ServerThread(tmp_path / "nothing-here") as server:
        tab = Page(browser, f"http://127.0.0.1:{server.service.http_port}", tmp_path)
        try:
            tab.open("/")
            assert tab.texts("#no-data h2") == ["No data yet"]
            tab.shot("no-data")
        finally:
            tab.page.close()


def _batch_tables(k: int) -> dict[str, list[dict]]:
    """Batch k's route tables: groups g0..gk, each with one broker and one topic, so a page
    showing a consistent snapshot has as many topics as broker groups."""
    groups = range(k + 1)
    return {
        TOPIC_QUEUE: [queue(f"T{i}", f"g{i}", 4) for i in groups],
        BROKER_ADDR: [addr(f"g{i}", 0, f"10.1.{i}.1:10911", "C") for i in groups],
        CLUSTER_ADDR: [{"cluster_name": "C", "broker_name": f"g{i}"} for i in groups],
        BROKER_LIVE: [live("C", f"10.1.{i}.1:10911", f"g{i}") for i in groups],
        FILTER_SERVER: [],
    }


def test_a_warehouse_being_written_never_shows_half_a_batch(browser, tmp_path):
    """A writer commits each batch table by table (pausing between them, as a slow job does)
    while the page is reloaded again and again: every fleet it draws has as many topics as
    groups, i.e. comes from one published batch."""
    root = tmp_path / "warehouse"
    writer = Warehouse(root)
    writer.publish(0, 1_000, _batch_tables(0))
    batches = 12
    with ServerThread(root) as server:
        wait_until(lambda: server.service.holder.current is not None)
        tab = Page(browser, f"http://127.0.0.1:{server.service.http_port}", tmp_path)
        done = threading.Event()

        def write() -> None:
            for k in range(1, batches):
                writer.publish(k, 1_000 + k, _batch_tables(k), pause_s=0.05)
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        seen: set[int] = set()
        try:
            while not done.is_set():
                tab.open("/")
                counts = tab.texts("#counts")[0]
                groups = int(counts.split(" broker groups")[0].rsplit("· ", 1)[1])
                topics = int(counts.split(" topics")[0].rsplit("· ", 1)[1])
                assert groups == topics, counts
                assert len(tab.texts("#fleet-table td.addr")) == groups
                seen.add(groups)
            last = 1_000 + batches - 1
            wait_until(lambda: server.service.holder.current.index.watermark == last)
            tab.open("/")
            shown = tab.texts("#fleet-table td.addr")
            assert sorted(shown) == sorted(f"10.1.{i}.1:10911" for i in range(batches))
            tab.shot("live-writer")
        finally:
            thread.join()
            tab.page.close()
    assert len(seen) >= 3, seen  # the page saw the fleet grow while it was written
