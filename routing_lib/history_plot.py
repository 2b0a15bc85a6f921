"""`routectl history plot`: broker membership and liveness over event time, as a PNG.

One lane per broker address, lanes grouped by brokerName ("brokerName addr"). Bars are the
address's broker_membership_history intervals, coloured by role (master id 0, slave ids > 0);
markers are its broker_liveness_events leaving brokerLiveTable (EXPIRED, UNREGISTERED,
REJECTED, CHANNEL_CLOSED). Open intervals are drawn up to the published watermark. Tables are
read with delta-rs; drawing uses the Agg canvas directly (no pyplot, no display needed).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import matplotlib.dates as mdates
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from routing_lib.core.history import (
    BROKER_LIVENESS_EVENTS,
    BROKER_MEMBERSHIP_HISTORY,
    CHANNEL_CLOSED,
    EXPIRED,
    REJECTED,
    UNREGISTERED,
)
from routing_lib.core.tables import PROGRESS, Row
from routing_lib.read.history import load_history
from routing_lib.read.warehouse import open_table

MASTER_COLOUR, SLAVE_COLOUR = "#1f77b4", "#9ecae1"
# Liveness event type -> (marker, colour, legend label).
MARKERS = {
    EXPIRED: ("x", "#d62728", "EXPIRED"),
    UNREGISTERED: ("|", "black", "UNREGISTERED"),
    REJECTED: ("v", "#ff7f0e", "REJECTED (registration refused: stale stateVersion)"),
    CHANNEL_CLOSED: ("X", "#8c564b", "CHANNEL_CLOSED (its last connection closed)"),
}
_MS_PER_DAY = 86_400_000
_BAR_HEIGHT = 0.6


def _to_datenum(ms: int) -> float:
    """Epoch ms -> Matplotlib date number (whatever rcParams['date.epoch'] is)."""
    epoch: float = mdates.date2num(datetime(1970, 1, 1, tzinfo=UTC))
    return epoch + ms / _MS_PER_DAY


def _watermark(warehouse: str | Path) -> int | None:
    rows = (
        open_table(warehouse, PROGRESS)
        .to_pyarrow_table(columns=["batch_id", "watermark"])
        .to_pylist()
    )
    return max(rows, key=lambda r: r["batch_id"])["watermark"] if rows else None


def _lanes(members: Iterable[Row], events: Iterable[Row]) -> list[tuple[str, str]]:
    """(brokerName, addr) lanes, sorted by group, then by the address's first appearance."""
    first: dict[tuple[str, str], int] = {}
    for row in members:
        lane = (row["broker_name"], row["broker_addr"])
        first[lane] = min(first.get(lane, row["valid_from"]), row["valid_from"])
    for row in events:
        lane = (row["broker_name"], row["broker_addr"])
        first[lane] = min(first.get(lane, row["event_time"]), row["event_time"])
    return sorted(first, key=lambda lane: (lane[0], first[lane], lane[1]))


def plot_history(
    warehouse: str | Path, out_png: str | Path, broker_names: Iterable[str] | None = None
) -> Path:
    """Draw the membership/liveness chart of `warehouse` into `out_png` (optionally only the
    given broker groups); returns the path written."""
    history = load_history(warehouse, tables=(BROKER_MEMBERSHIP_HISTORY, BROKER_LIVENESS_EVENTS))
    wanted = set(broker_names) if broker_names is not None else None
    members = [
        r
        for r in history[BROKER_MEMBERSHIP_HISTORY]
        if wanted is None or r["broker_name"] in wanted
    ]
    events = [
        r for r in history[BROKER_LIVENESS_EVENTS] if wanted is None or r["broker_name"] in wanted
    ]
    lanes = _lanes(members, events)
    times = [r["valid_from"] for r in members] + [r["valid_to"] for r in members if r["valid_to"]]
    times += [r["event_time"] for r in events]
    end = _watermark(warehouse) or max(times, default=0)
    end = max([end, *times])
    start = min(times, default=end)

    fig = Figure(figsize=(14, max(3.0, 1.6 + 0.28 * len(lanes))), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    y_of = {lane: i for i, lane in enumerate(lanes)}

    # Alternate a light background per broker group, so lanes read as groups.
    groups: dict[str, list[int]] = {}
    for (name, _), y in y_of.items():
        groups.setdefault(name, []).append(y)
    for i, group_ys in enumerate(groups.values()):
        if i % 2:
            ax.axhspan(min(group_ys) - 0.5, max(group_ys) + 0.5, color="#f2f2f2", zorder=0)

    for row in members:
        y = y_of[(row["broker_name"], row["broker_addr"])]
        left = _to_datenum(row["valid_from"])
        width = _to_datenum(row["valid_to"] if row["valid_to"] is not None else end) - left
        colour = MASTER_COLOUR if row["broker_id"] == 0 else SLAVE_COLOUR
        ax.broken_barh(
            [(left, width)],
            (y - _BAR_HEIGHT / 2, _BAR_HEIGHT),
            facecolors=colour,
            edgecolors="none",
            zorder=2,
        )

    for kind, (marker, colour, _) in MARKERS.items():
        points = [
            (_to_datenum(r["event_time"]), y_of[(r["broker_name"], r["broker_addr"])])
            for r in events
            if r["event_type"] == kind
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(
                xs,
                ys,
                marker=marker,
                color=colour,
                s=90 if marker == "|" else 40,
                linewidths=1.5,
                zorder=3,
            )

    ax.set_yticks(range(len(lanes)), [f"{name} {addr}" for name, addr in lanes], fontsize=8)
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # first group on top
    pad = max((end - start) * 0.01, 1000)
    ax.set_xlim(_to_datenum(start - pad), _to_datenum(end + pad))
    locator = mdates.AutoDateLocator(tz=UTC)
    ax.xaxis.set_major_locator(locator)
    formatter = mdates.ConciseDateFormatter(locator, tz=UTC)
    formatter.formats[-1] = "%H:%M:%S"  # short spans: clock times, not bare seconds
    ax.xaxis.set_major_formatter(formatter)
    ax.grid(axis="x", color="#dddddd", zorder=1)
    ax.set_xlabel("event time (UTC)")
    day = datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%d %H:%M")
    ax.set_title(
        f"Broker membership and liveness from {day} UTC (open intervals up to the watermark)",
        fontsize=11,
    )
    handles: list[Artist] = [
        Patch(color=MASTER_COLOUR, label="member as master (id 0)"),
        Patch(color=SLAVE_COLOUR, label="member as slave (id > 0)"),
    ]
    handles += [
        Line2D([], [], linestyle="none", marker=m, color=c, markersize=7, label=label)
        for m, c, label in MARKERS.values()
    ]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False
    )
    if not lanes:
        ax.text(0.5, 0.5, "no broker history", transform=ax.transAxes, ha="center")

    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
