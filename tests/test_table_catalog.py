"""The table catalog (routing_lib/core/catalog.py) is consistent, and what derives from it
stays in step: the step's output rows, housekeeping's list, the readers' lists, the Arrow
schemas and the docs. Pure Python: no Spark, no Kafka."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from routing_lib.console.pins import PINNED_TABLES
from routing_lib.core import catalog_doc
from routing_lib.core.admin import ADMIN_KEY, group_key
from routing_lib.core.catalog import (
    CATALOG,
    DEAD_LETTER,
    PROGRESS,
    STORED_NAMES,
    TABLE_NAMES,
    TABLES,
    ArrayOf,
    Family,
    Reader,
    Scalar,
    StructOf,
    WriteMode,
    read_by,
    spark_type,
)
from routing_lib.core.columnar import bundle_rows
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.core.history import HISTORY_TABLES
from routing_lib.core.rows import WRITES, RowKind, RowOp, StepRow
from routing_lib.core.step import (
    BatchContext,
    InputRow,
    StepConfig,
    admin_log_rows,
    dead_row,
    step_group,
)
from routing_lib.core.tables import ROUTE_TABLES
from routing_lib.core.wire import externalize, pack_event
from routing_lib.housekeeping import WAREHOUSE_TABLES, partition_filters
from routing_lib.lookup.routes import SMALL_TABLES
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.warehouse import OPTIONAL_TABLES, SNAPSHOT_TABLES
from schemas import parse_event

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"
NO_CONTENT_REFS = 1 << 62  # every state value stays inline


# ---- the catalog itself ------------------------------------------------------------------------


def test_table_names_are_unique_and_column_names_unique_per_table():
    assert len(set(TABLE_NAMES)) == len(CATALOG) == 18
    for spec in CATALOG:
        assert len(set(spec.column_names)) == len(spec.columns), spec.name


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: s.name)
def test_keys_identity_close_and_partition_columns_are_columns(spec):
    columns = set(spec.column_names)
    for role in ("keys", "identity", "close_columns", "partition_by"):
        assert set(getattr(spec, role)) <= columns, (spec.name, role)


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: s.name)
def test_each_family_has_the_shape_its_writer_relies_on(spec):
    if spec.family is Family.ROUTE:  # merged on the key: one row per key
        # topic_queue_table: derived by the writer from topic_base and topic_overlay
        want_kind = None if spec.name == "topic_queue_table" else RowKind.CHANGE
        assert spec.write_mode is WriteMode.MERGE and spec.row_kind is want_kind
        assert spec.keys and not spec.identity
        # a group's rows are one partition (issue 36): replaced by file-level actions
        assert spec.partition_by in ((), ("broker_name",))
    elif spec.family is Family.HISTORY:  # merged on (event_date, identity)
        assert spec.write_mode is WriteMode.MERGE and spec.row_kind is RowKind.HISTORY
        assert spec.identity and spec.partition_by == ("event_date",)
        if spec.close_columns:  # an interval: one version of a key per valid_from
            assert spec.identity == (*spec.keys, "valid_from")
            assert "valid_to" in spec.close_columns
    else:  # appended, no key
        assert spec.write_mode is WriteMode.APPEND
        assert not spec.keys and not spec.identity and not spec.partition_by
    assert spec.readers, f"{spec.name}: nobody reads it"
    assert spec.doc


def test_the_writer_makes_the_progress_row_itself():
    assert [s.name for s in CATALOG if s.row_kind is None] == ["topic_queue_table", PROGRESS]


def test_ddl_spells_every_column_in_order_as_spark_does():
    assert TABLES["broker_live_table"].ddl == (
        "cluster_name STRING, broker_addr STRING, broker_name STRING, "
        "last_update_timestamp BIGINT, heartbeat_timeout_millis BIGINT, ha_server_addr STRING, "
        "data_version STRUCT<state_version: BIGINT, timestamp: BIGINT, counter: BIGINT>"
    )
    assert TABLES["filter_server_table"].ddl == (
        "cluster_name STRING, broker_addr STRING, broker_name STRING, "
        "filter_server_list ARRAY<STRING>"
    )
    assert TABLES[DEAD_LETTER].ddl.startswith("raw BINARY, raw_text STRING, source STRING, ")
    assert spark_type(ArrayOf(Scalar.INT)) == "ARRAY<INT>"


def test_arrow_schemas_follow_the_columns():
    expected = {Scalar.INT: pa.int32(), Scalar.BIGINT: pa.int64(), Scalar.STRING: pa.string()}
    for spec in CATALOG:
        schema = arrow_schema(spec.name)
        assert schema.names == list(spec.column_names), spec.name
        for column in spec.columns:
            field = schema.field(column.name)
            assert field.nullable == column.nullable
            if column.type in expected:
                assert field.type == expected[column.type], (spec.name, column.name)
            if isinstance(column.type, StructOf):
                assert pa.types.is_struct(field.type)
    live = arrow_schema(TABLES["filter_server_table"])
    assert live.field("filter_server_list").type == pa.list_(pa.string())


# ---- what derives from it ----------------------------------------------------------------------


def test_housekeeping_covers_every_table_and_filters_the_partitioned_ones_by_day():
    assert WAREHOUSE_TABLES == tuple(s.name for s in CATALOG if not s.derived_from)
    assert "topic_route_history" not in WAREHOUSE_TABLES  # derived: no files
    for spec in CATALOG:
        filters = partition_filters(spec.name, "2025-11-24", "2025-11-26")
        if spec.partition_by == ("event_date",):
            assert filters == [
                ("event_date", ">=", "2025-11-24"),
                ("event_date", "<", "2025-11-26"),
            ]
        else:
            assert filters is None, spec.name
    assert partition_filters("no_such_table", "2025-11-24", None) is None


def test_readers_table_lists_are_the_catalogs():
    assert SNAPSHOT_TABLES == (*ROUTE_TABLES, PROGRESS) == read_by(Reader.DUMP)
    assert OPTIONAL_TABLES == {"kv_config_table"}
    # the lookup serves topicQueueTable from topic_base + topic_overlay (issue 36)
    lookup = {"topic_queue_table", "topic_base", "topic_overlay", PROGRESS}
    assert set(SMALL_TABLES) | lookup == set(read_by(Reader.LOOKUP))
    assert set(PINNED_TABLES) <= set(read_by(Reader.CONSOLE))
    # (+ the group layout's change tables, which topic_route_history is derived from)
    history = set(HISTORY_TABLES) | {"topic_base_changes", "topic_overlay_changes"}
    assert history == set(read_by(Reader.HISTORY)) == set(read_by(Reader.RECIPES))


def _golden_step_rows() -> list[StepRow]:
    """Every output row of the shipped step over every golden fixture: each group's events in
    one call, then a call whose watermark passes every deadline, then its first event again as
    a late one; and the admin group's log rows."""
    rows: list[StepRow] = []
    config = StepConfig(DEFAULT_FLAGS)
    for fixture in sorted(GOLDEN.iterdir()):
        groups: dict[str, list[InputRow]] = defaultdict(list)
        for n, line in enumerate((fixture / "events.jsonl").read_text().splitlines()):
            if not line.strip() or '"TICK"' in line:
                continue
            event = parse_event(line)
            payload = externalize(pack_event(event), None, NO_CONTENT_REFS)
            groups[group_key(event)].append(InputRow(event.eventTime, ("f", n), payload))
        last = max(r.event_time for group in groups.values() for r in group)
        now, later = BatchContext(last, 0), BatchContext(last + 10**9, last)
        for key, inputs in groups.items():
            if key == ADMIN_KEY:
                rows += admin_log_rows(inputs, now, None)
                continue
            first = step_group(key, None, inputs, now, config)
            # every deadline passes: expiries, deletes, intervals closed
            rest = step_group(key, first.state, [], later, config) if first.state else None
            # the first event again, behind the published watermark: a late one
            late = step_group(key, None, inputs[:1], BatchContext(later.watermark, last), config)
            rows += first.rows + (rest.rows if rest else []) + late.rows
    return rows


def test_every_table_the_step_writes_is_in_the_catalog_with_its_columns():
    rows = _golden_step_rows()
    rows.append(dead_row("{not json", ("f", 0), "unparseable", BatchContext(0, 0)))
    plans = {(s.row_kind, s.name): s for s in CATALOG if s.row_kind is not None}
    written: set[tuple[RowKind, str]] = set()
    listed: set[str] = set()
    for row in rows:
        if row.kind is RowKind.STATS:
            listed |= set(json.loads(row.row_json)[WRITES])
            continue
        assert row.table is not None
        spec = plans[row.kind, row.table]  # KeyError: a table the catalog does not know
        written.add((row.kind, row.table))
        bundle = json.loads(row.row_json)
        if row.kind in (RowKind.CHANGE, RowKind.HISTORY):  # either form: core/columnar.py
            bundle = bundle_rows(row.table, row.row_json)
        for written_row in bundle if isinstance(bundle, list) else [bundle]:
            names = set(written_row) | ({"raw"} if row.kind is RowKind.DEAD else set())
            if row.op is RowOp.DELETE and spec.family is Family.ROUTE:
                assert names == set(spec.keys), spec.name
            elif row.op is RowOp.CLOSE:
                assert set(spec.identity) <= names <= set(spec.column_names), spec.name
            else:
                assert names == set(spec.column_names), (spec.name, row.op)
    # the goldens reach every table the step writes, so the check above saw each one
    # (topic_queue_table: derived by the writer; topic_route_history: derived when read)
    assert {t for _, t in written} == set(STORED_NAMES) - {PROGRESS, "topic_queue_table"}
    assert {w.split("/", 1)[1] for w in listed} <= set(TABLE_NAMES)


# ---- the docs ----------------------------------------------------------------------------------


def test_docs_table_list_is_generated_from_the_catalog():
    text = (ROOT / "docs" / "tables.md").read_text()
    assert catalog_doc.synced(text) == text, (
        "docs/tables.md is out of date: run "
        ".venv/bin/python -m routing_lib.core.catalog_doc --sync docs/tables.md"
    )
    assert all(f"| `{name}` |" in text for name in TABLE_NAMES)


def test_housekeeping_docs_list_every_table():
    text = (ROOT / "docs" / "housekeeping.md").read_text()
    section = text.split("## What it does, table by table", 1)[1].split("A table that", 1)[0]
    listed = set(re.findall(r"`([a-z_]+)`", section))
    assert listed == set(TABLE_NAMES)  # the derived topic_route_history: said to be derived
