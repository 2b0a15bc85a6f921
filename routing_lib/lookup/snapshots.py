"""Build the next RouteIndex from the warehouse: in proportion to what changed.

topicQueueTable is read as topic_base + topic_overlay (issue 36; route_topics.py): the base
index (topic -> holders) is built from topic_base, and the overlay rows decide at read time
which holders are present and with which perm. `load_index` reads the tables at pinned
versions (the first load, and the fall-back). `next_index` starts from the served index:

* topic_base's change feed gives the (topic, broker) rows that changed: only those topics
  get new base entries, in a small per-process delta over the shared base index;
* topic_overlay's change feed gives the groups whose overlay changed (a fault: one row):
  each flip is one vectorised update of the per-topic counts, no topic entry is rebuilt;
* the other route tables are sized by brokers: a changed one is read whole (a few hundred
  rows). topic_queue_table (what analysts read) is not read at all.

When the delta holds more than `max_change_fraction` of the base's topics (and more than
`min_full_rows`), or the
change feed cannot answer (not enabled on a version, files or commits cleaned up), the base
index is rebuilt at the new version (through `SharedIndexes` when the processes share one:
the first process writes the file, the others map it).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY
from routing_lib.core.fact_rows import overlay_of_row
from routing_lib.core.overlay import Overlay
from routing_lib.core.tables import PROGRESS, Row
from routing_lib.lookup import base_build
from routing_lib.lookup.base_changes import REMOVES, changed_entries
from routing_lib.lookup.base_index import BaseIndex
from routing_lib.lookup.progress_watermark import ProgressWatermarks
from routing_lib.lookup.route_topics import RouteTopics
from routing_lib.lookup.routes import SMALL_TABLES, RouteIndex
from routing_lib.lookup.shared_index import SharedIndexes
from routing_lib.read.open_tables import OpenTables
from routing_lib.read.warehouse import (
    ChangesUnavailableError,
    WarehouseError,
    read_changes,
    read_version,
)

# route_progress's latest row per version read: the next build reads only the new commits
WATERMARKS = ProgressWatermarks()


@dataclass(frozen=True)
class Built:
    index: RouteIndex
    how: str  # "full" or "incremental"
    reason: str = ""  # why a full load where an incremental one was possible
    changed_rows: int = 0  # topic_base rows the change feed gave
    changed_topics: int = 0  # -1: not known (moved to another process's base index)
    changed_groups: int = 0  # groups whose overlay changed


def _give_back_memory() -> None:
    """Return the freed buffers of a whole-table read to the system (Arrow's pool and the C
    heap keep them otherwise: ~100 MB after reading 1 M rows)."""
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _small_rows(tables: OpenTables, table: str, versions: Mapping[str, int]) -> list[Row]:
    if table not in versions:
        return []  # an optional table an older warehouse lacks
    rows: list[Row] = read_version(
        tables.warehouse, table, versions[table], tables=tables
    ).to_pylist()
    return rows


def _require_group_layout(versions: Mapping[str, int]) -> None:
    missing = [t for t in (TOPIC_BASE, TOPIC_OVERLAY) if t not in versions]
    if missing:
        raise WarehouseError(
            f"the warehouse has no {' / '.join(missing)}: it predates the group-level layout "
            "(issue 36); run `routectl migrate` on it"
        )


def base_index(
    warehouse: str | Path,
    version: int,
    shared: SharedIndexes | None = None,
    tables: OpenTables | None = None,
) -> BaseIndex:
    """topic_base at `version` as a BaseIndex: a shared file when `shared` (mapped if a
    process wrote it already; a large one written by a process of its own, base_build.py),
    else in this process's memory."""
    table = (tables or OpenTables(warehouse)).at(TOPIC_BASE, version)
    table_id = str(table.metadata().id)
    try:
        if shared is None:
            return BaseIndex(base_build.record_batch(warehouse, version), version, table_id)
        rows = _row_count(table)
        if rows is not None and rows >= base_build.SUBPROCESS_ROWS:
            return shared.publish(
                table_id,
                version,
                lambda out: base_build.write_in_subprocess(warehouse, version, out),
            )
        return shared.publish(
            table_id, version, lambda out: base_build.write(warehouse, version, out)
        )
    finally:
        _give_back_memory()


def _row_count(table: DeltaTable) -> int | None:
    """The rows of the table's files by their statistics (None: not recorded)."""
    actions = table.get_add_actions(flatten=True)
    if "num_records" not in actions.schema.names:
        return None
    counts = pa.table(actions).column("num_records")
    return None if counts.null_count else int(pc.sum(counts).as_py() or 0)


def _share_arrays(
    topics: RouteTopics, overlay_version: int, shared: SharedIndexes | None
) -> RouteTopics:
    """`topics` over the service's shared file of its present/counts arrays (one copy for
    every process: they are a function of the base index file and the overlays, named by
    both), unless this process has no shared directory or maps them already."""
    if shared is None or topics.arrays_key is not None:
        return topics
    base = topics.base
    key = f"{base.table_id}-{base.version:020d}-{overlay_version:020d}"
    present, counts = shared.arrays(key, [topics.present, topics.counts])
    return topics.with_arrays(present, counts, key)


def overlays_at(
    warehouse: str | Path, versions: Mapping[str, int], tables: OpenTables | None = None
) -> dict[str, Overlay]:
    rows = _small_rows(tables or OpenTables(warehouse), TOPIC_OVERLAY, versions)
    return {row["broker_name"]: overlay_of_row(row) for row in rows}


def load_index(
    warehouse: str | Path,
    versions: Mapping[str, int],
    *,
    support_acting_master: bool = False,
    order_message_enable: bool = False,
    shared: SharedIndexes | None = None,
    tables: OpenTables | None = None,
) -> RouteIndex:
    """Every table read whole at `versions` (topic_base: the newest shared base index at or
    before its version brought up to it by the change feed, when another process wrote one
    and the feed can). `tables`: the reader's open tables (none: opened here)."""
    _require_group_layout(versions)
    tables = tables or OpenTables(warehouse)
    version, overlays = versions[TOPIC_BASE], overlays_at(warehouse, versions, tables)
    topics = _from_shared(tables, version, overlays, shared)
    if topics is None:
        topics = RouteTopics.of(base_index(warehouse, version, shared, tables), overlays)
    topics = _share_arrays(topics, versions[TOPIC_OVERLAY], shared)
    return RouteIndex.assemble(
        topics,
        {t: _small_rows(tables, t, versions) for t in SMALL_TABLES},
        versions,
        WATERMARKS.watermark(warehouse, versions[PROGRESS]),
        support_acting_master=support_acting_master,
        order_message_enable=order_message_enable,
    )


def _from_shared(
    tables: OpenTables,
    version: int,
    overlays: Mapping[str, Overlay],
    shared: SharedIndexes | None,
    max_change_fraction: float = 0.25,
) -> RouteTopics | None:
    """topic_base at `version` over the newest base index another process of the service
    wrote (a worker started later maps the primary's file instead of writing its own), or
    None: none, or the change feed cannot cover the gap, or it changed too much."""
    if shared is None:
        return None
    table_id = str(tables.at(TOPIC_BASE, version).metadata().id)
    base = shared.newest(table_id, version)
    if base is None:
        return None
    try:
        topics = _rebased(tables, RouteTopics.of(base, overlays), base, version)
    except ChangesUnavailableError:
        return None
    return topics if topics.delta_topics <= max_change_fraction * base.topic_count else None


def _in_commit_order(changes: pa.Table, columns: tuple[str, ...]) -> list[dict[str, object]]:
    """The change rows, a commit's removals before its inserts (an overwrite removes and
    adds the same key), as dicts of `columns` + `_remove`."""
    cols = {c: changes.column(c).to_pylist() for c in (*columns, "_change_type")}
    versions = changes.column("_commit_version").to_pylist()
    kinds = cols.pop("_change_type")
    order = sorted(range(changes.num_rows), key=lambda i: (versions[i], kinds[i] not in REMOVES))
    return [{**{c: cols[c][i] for c in cols}, "_remove": kinds[i] in REMOVES} for i in order]


def changed_overlays(changes: pa.Table) -> dict[str, Overlay | None]:
    """Per group whose topic_overlay row changed: its overlay after them (None: no row)."""
    out: dict[str, Overlay | None] = {}
    if changes.num_rows == 0:
        return out
    columns = ("broker_name", "present", "perm_op", "covered")
    for row in _in_commit_order(changes, columns):
        out[str(row["broker_name"])] = None if row["_remove"] else overlay_of_row(row)
    return out


def _overlay_changes(
    tables: OpenTables, current: RouteTopics, old: int | None, new: int
) -> dict[str, Overlay | None]:
    if old == new:
        return {}
    if old is not None and old < new:
        with contextlib.suppress(ChangesUnavailableError):
            found = changed_overlays(
                read_changes(tables.warehouse, TOPIC_OVERLAY, old + 1, new, tables)
            )
            return {g: o for g, o in found.items() if o != current.overlays.get(g)}
    # no change feed: the table is small (a row per group), compare it whole
    now = overlays_at(tables.warehouse, {TOPIC_OVERLAY: new}, tables)
    gone: dict[str, Overlay | None] = {g: None for g in current.overlays if g not in now}
    return {**gone, **{g: o for g, o in now.items() if current.overlays.get(g) != o}}


def _rebased(tables: OpenTables, topics: RouteTopics, base: BaseIndex, version: int) -> RouteTopics:
    """`topics`' overlays over another base index, brought to topic_base `version` by the
    change feed from the base's version (ChangesUnavailableError: it cannot)."""
    fresh = RouteTopics.of(base, topics.overlays)
    if base.version == version:
        return fresh
    changes = read_changes(tables.warehouse, TOPIC_BASE, base.version + 1, version, tables)
    entries, ids = changed_entries(fresh, changes)
    return fresh.changed(entries, {}, ids)


def next_index(
    warehouse: str | Path,
    current: RouteIndex | None,
    versions: Mapping[str, int],
    *,
    support_acting_master: bool = False,
    order_message_enable: bool = False,
    max_change_fraction: float = 0.25,
    min_full_rows: int = 1000,
    shared: SharedIndexes | None = None,
    tables: OpenTables | None = None,
) -> Built:
    """The index of `versions` (pinned, settled), from `current` where possible. `tables`:
    the reader's open tables, kept between builds (none: opened here)."""
    _require_group_layout(versions)
    tables = tables or OpenTables(warehouse)
    flags = {
        "support_acting_master": support_acting_master,
        "order_message_enable": order_message_enable,
    }

    def full(reason: str) -> Built:
        index = load_index(warehouse, versions, shared=shared, tables=tables, **flags)
        return Built(index, "full", reason)

    if current is None:
        return full("first load")
    if (current.support_acting_master, current.order_message_enable) != (
        support_acting_master,
        order_message_enable,
    ):
        return full("other route options")
    served = current.versions
    old, new = served.get(TOPIC_BASE), versions[TOPIC_BASE]
    if old is None or new < old or TOPIC_OVERLAY not in served:
        return full(f"{TOPIC_BASE} version {old} -> {new}")
    # the topics whose entries may differ from the served index's (None: any may)
    changed: frozenset[str] | None = frozenset()
    topics, rows = current.store, 0
    base_version = topics.base.version
    newer = shared.newest(topics.base.table_id, new, base_version) if shared is not None else None
    if newer is not None and newer.version > base_version:
        # another process wrote a newer base: use it (its delta is shorter, and the older
        # file's pages go once no process maps it); which topics changed is not known
        with contextlib.suppress(ChangesUnavailableError):
            topics = _rebased(tables, topics, newer, new)
            old, changed = new, None
    if new != old:
        try:
            changes = read_changes(warehouse, TOPIC_BASE, old + 1, new, tables)
        except ChangesUnavailableError as exc:
            return full(f"no change feed: {exc}")
        rows = changes.num_rows
        entries, ids = changed_entries(topics, changes)
        topics, changed = topics.changed(entries, {}, ids), frozenset(entries)
        limit = max(min_full_rows, max_change_fraction * topics.base.topic_count)
        if topics.delta_topics > limit:  # the delta is large: a base at this version
            base = base_index(warehouse, new, shared, tables)
            topics = _rebased(tables, topics, base, new)
    groups = _overlay_changes(tables, topics, served.get(TOPIC_OVERLAY), versions[TOPIC_OVERLAY])
    if groups:
        topics = topics.changed({}, groups)
    topics = _share_arrays(topics, versions[TOPIC_OVERLAY], shared)
    small = {
        t: _small_rows(tables, t, versions)
        for t in SMALL_TABLES
        if versions.get(t) != served.get(t)
    }
    watermark = (
        current.watermark
        if versions[PROGRESS] == served.get(PROGRESS)
        else WATERMARKS.watermark(warehouse, versions[PROGRESS], since=served.get(PROGRESS))
    )
    index = RouteIndex.assemble(
        topics,
        small,
        versions,
        watermark,
        previous=current,
        changed_topics=changed,
        flipped_groups=frozenset(groups),
        **flags,
    )
    _give_back_memory()  # the batch's Arrow reads: freed, but kept by the pools otherwise
    return Built(
        index,
        "incremental",
        changed_rows=rows,
        changed_topics=len(changed) if changed is not None else -1,
        changed_groups=len(groups),
    )
