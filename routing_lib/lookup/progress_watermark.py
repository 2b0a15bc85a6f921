"""The served watermark, from route_progress's new commits only.

The watermark of a snapshot is that of route_progress's row with the highest batch id
(read.warehouse.read_watermark reads every row: one file per batch the job appended, so a
read costs more with every batch until route_progress is compacted). The job appends one
row per batch, and each append's commit file carries the row's statistics: a one-row file's
minimum and maximum are its values. So the next snapshot's watermark is found from the
commits after the served version: the highest batch id among the rows they add, against the
served snapshot's (kept here per warehouse and version). Anything else in those commits (a
removed file, a file of several rows, statistics missing, a batch id equal to the served
one's: which row wins is then the read's order) and the table is read whole, as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from routing_lib import storage
from routing_lib.core.tables import PROGRESS
from routing_lib.read.open_tables import commit_file
from routing_lib.read.warehouse import read_version


@dataclass(frozen=True)
class Latest:
    """route_progress at one version: the highest batch id and that row's watermark."""

    batch_id: int | None
    watermark: int | None


class ProgressWatermarks:
    """The latest row of the versions read here (the last few), to step from one to the next."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._seen: dict[tuple[str, int], Latest] = {}

    def watermark(
        self, warehouse: str | Path, version: int, since: int | None = None
    ) -> int | None:
        """The watermark at `version`; from the commits after `since` when it was read here."""
        known = self._seen.get((str(warehouse), since)) if since is not None else None
        latest = None
        if known is not None and since is not None and since <= version:
            latest = _step(warehouse, known, since, version)
        if latest is None:
            latest = _read_whole(warehouse, version)
        self._remember(str(warehouse), version, latest)
        return latest.watermark

    def _remember(self, warehouse: str, version: int, latest: Latest) -> None:
        self._seen[warehouse, version] = latest
        while len(self._seen) > self.keep:
            self._seen.pop(next(iter(self._seen)))


def _read_whole(warehouse: str | Path, version: int) -> Latest:
    rows = read_version(warehouse, PROGRESS, version, ["batch_id", "watermark"]).to_pylist()
    if not rows:
        return Latest(None, None)
    last = max(rows, key=lambda r: r["batch_id"])
    return Latest(last["batch_id"], last["watermark"])


def _step(warehouse: str | Path, known: Latest, since: int, version: int) -> Latest | None:
    """`known` (at `since`) moved to `version` by the rows its commits append, or None: a
    commit that is not a plain append of one-row files with statistics, or a tie."""
    latest = known
    for at in range(since + 1, version + 1):
        path = commit_file(storage.join(str(warehouse), PROGRESS), at)
        try:
            lines = storage.read_text(path).splitlines()
        except OSError:
            return None  # cleaned up: read the table
        for line in lines:
            action = json.loads(line) if line.strip() else {}
            if "remove" in action or "metaData" in action:
                return None
            if "add" in action:
                row = _one_row(action["add"])
                if row is None or (latest.batch_id is not None and row[0] == latest.batch_id):
                    return None
                if latest.batch_id is None or row[0] > latest.batch_id:
                    latest = Latest(row[0], row[1])
    return latest


def _one_row(add: dict[str, object]) -> tuple[int, int | None] | None:
    """(batch_id, watermark) of an added one-row file, from its statistics (None: not one
    row, or not recorded)."""
    stats_text = add.get("stats")
    if not isinstance(stats_text, str):
        return None
    stats = json.loads(stats_text)
    if stats.get("numRecords") != 1:
        return None
    low, high = stats.get("minValues") or {}, stats.get("maxValues") or {}
    nulls = stats.get("nullCount") or {}
    batch = low.get("batch_id")
    if not isinstance(batch, int) or high.get("batch_id") != batch:
        return None
    if nulls.get("watermark") == 1:
        return batch, None
    watermark = low.get("watermark")
    if not isinstance(watermark, int) or high.get("watermark") != watermark:
        return None
    return batch, watermark
