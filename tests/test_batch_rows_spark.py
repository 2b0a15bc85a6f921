"""The writer's Arrow parse of the step's bundles (routing_lib/spark/batch_rows.py) against
Spark's `from_json` + explode, which it replaces: the same rows for every table the writer
MERGEs, and Spark's rows where pyarrow's reader refuses the text; columnar bundles
(routing_lib/core/columnar.py) give the rows `bundle_rows` expands them to, both ways."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from routing_lib.core.catalog import ArrayOf, ColumnType, Scalar, StructOf, TableSpec
from routing_lib.core.columnar import ROW_COLUMNS, bundle_json, bundle_rows
from routing_lib.core.rows import RowKind
from routing_lib.core.step import json_array
from routing_lib.spark.batch_rows import BatchRows, _parsed, exploded
from routing_lib.spark.delta_writer import STEP_TABLES

MERGED = [(kind, spec) for kind, spec in STEP_TABLES if spec.write_mode.value == "merge"]
# strings JSON escapes, non-ASCII, an empty one
TEXTS = ['a"b\\c\nd\te', "ünï €", "", "x" * 300, "\u2028 \x00"]
INTS = [0, -1, 2**31 - 1, -(2**31)]
BIGINTS = [0, 2**63 - 1, -(2**63), 1764000000000]


def _value(kind: ColumnType, i: int) -> object:
    """The i-th sample value of a column type (every 5th null)."""
    if i % 5 == 4:
        return None
    if isinstance(kind, ArrayOf):
        return [_value(kind.element, i + j) for j in range(i % 3)]  # empty lists too
    if isinstance(kind, StructOf):
        return {f.name: _value(f.type, i + n) for n, f in enumerate(kind.fields)}
    return {
        Scalar.STRING: TEXTS[i % len(TEXTS)],
        Scalar.INT: INTS[i % len(INTS)],
        Scalar.BIGINT: BIGINTS[i % len(BIGINTS)],
        Scalar.BOOLEAN: i % 2 == 0,
    }[kind]


def _bundles(kind: RowKind, spec: TableSpec, rows_per_bundle: int = 7) -> pa.Table:
    """Three bundles (ops differ) of sample rows, a row missing a column and one with a
    column the table does not have."""
    bundles = []
    for b, op in enumerate(["upsert", "delete", "append"]):
        rows = [
            {c.name: _value(c.type, b * 11 + r + n) for n, c in enumerate(spec.columns)}
            for r in range(rows_per_bundle)
        ]
        rows[0].pop(spec.columns[-1].name)
        rows[1]["not_a_column"] = {"x": [1]}
        bundles.append((kind.value, spec.name, op, json_array(rows), None))
    bundles.append((kind.value, spec.name, "upsert", "[]", None))  # an empty bundle
    names = ["kind", "table", "op", "row_json", "raw"]
    schema = pa.schema([(n, pa.binary() if n == "raw" else pa.string()) for n in names])
    return pa.Table.from_pylist([dict(zip(names, b, strict=True)) for b in bundles], schema)


def _by_spark(rows: BatchRows, bundles: pa.Table, spec: TableSpec) -> list[dict]:
    return exploded(rows.frame(bundles), spec).toArrow().to_pylist()


@pytest.mark.parametrize(("kind", "spec"), MERGED, ids=[s.name for _, s in MERGED])
def test_arrow_parse_equals_sparks_explode(spark, kind, spec):
    bundles = _bundles(kind, spec)
    rows = BatchRows(spark, bundles)
    parsed = _parsed(bundles, spec)  # the fast path itself: no fallback taken
    assert parsed.num_rows == 21
    assert parsed.to_pylist() == _by_spark(rows, bundles, spec)
    assert rows.table_rows(kind, spec).to_pylist() == parsed.to_pylist()


def test_text_pyarrow_refuses_is_parsed_by_spark(spark):
    """A lone surrogate escape (json.dumps writes one; Spark reads it and writes '?'):
    pyarrow's reader refuses it, so the table's rows come from Spark, as before."""
    kind, spec = next((k, s) for k, s in MERGED if s.name == "topic_base")
    row = {"topic": "a\ud800b", "broker_name": "g", "perm": 6}
    bundles = pa.Table.from_pylist(
        [
            {
                "kind": kind.value,
                "table": spec.name,
                "op": "upsert",
                "row_json": json.dumps([row]),
                "raw": None,
            }
        ],
        pa.schema(
            [
                ("kind", pa.string()),
                ("table", pa.string()),
                ("op", pa.string()),
                ("row_json", pa.string()),
                ("raw", pa.binary()),
            ]
        ),
    )
    with pytest.raises(pa.ArrowInvalid):
        _parsed(bundles, spec)
    rows = BatchRows(spark, bundles)
    got = rows.table_rows(kind, spec).to_pylist()
    assert got == _by_spark(rows, bundles, spec)
    assert got[0]["broker_name"] == "g" and got[0]["perm"] == 6


def test_a_table_read_in_parts_is_the_same(spark, monkeypatch):
    """Bundles read a few at a time (the reader's parts bound its copies) give the rows of
    one read, in order."""
    import routing_lib.spark.batch_rows as batch_rows

    kind, spec = next((k, s) for k, s in MERGED if s.name == "topic_base_changes")
    bundles = pa.concat_tables([_bundles(kind, spec, rows_per_bundle=3 + n) for n in range(4)])
    rows = BatchRows(spark, bundles)
    whole = rows.table_rows(kind, spec).to_pylist()
    monkeypatch.setattr(batch_rows, "_PART_BYTES", 1)  # every bundle a part of its own
    assert len(list(rows._parts(kind, spec.name))) == bundles.num_rows
    assert rows.table_rows(kind, spec).to_pylist() == whole
    assert whole == _by_spark(rows, bundles, spec)


COLUMNAR = [(kind, spec) for kind, spec in MERGED if spec.name in ROW_COLUMNS]
_NAMES = ["kind", "table", "op", "row_json", "raw"]
_SCHEMA = pa.schema([(n, pa.binary() if n == "raw" else pa.string()) for n in _NAMES])


def _blocks(spec: TableSpec, seed: int) -> list[dict]:
    """Sample blocks: shared columns once, row columns as arrays (nulls among them); one block
    leaves out every row column but the first, one has no row, one holds a single row."""
    row_columns = ROW_COLUMNS[spec.name]
    blocks = []
    for b, rows in enumerate([5, 1, 0, 3]):
        block = {
            c.name: [_value(c.type, seed + b + r + n) for r in range(rows)]
            if c.name in row_columns
            else _value(c.type, seed + b + n)
            for n, c in enumerate(spec.columns)
        }
        if b == 1:
            block = {k: v for k, v in block.items() if k not in row_columns[1:]}
        blocks.append(block)
    return blocks


def _columnar_bundles(kind: RowKind, spec: TableSpec) -> pa.Table:
    bundles = [
        (kind.value, spec.name, op, bundle_json(_blocks(spec, 3 * n)), None)
        for n, op in enumerate(["upsert", "delete", "append"])
    ]
    bundles.append((kind.value, spec.name, "upsert", bundle_json([]), None))  # no block
    return pa.Table.from_pylist([dict(zip(_NAMES, b, strict=True)) for b in bundles], _SCHEMA)


def _expected(bundles: pa.Table, spec: TableSpec) -> list[dict]:
    """The bundles' rows as `bundle_rows` gives them, with the writer's op and every column."""
    return [
        {"op": op, **{c: row.get(c) for c in spec.column_names}}
        for op, text in zip(bundles["op"].to_pylist(), bundles["row_json"].to_pylist(), strict=True)
        for row in bundle_rows(spec.name, text)
    ]


@pytest.mark.parametrize(("kind", "spec"), COLUMNAR, ids=[s.name for _, s in COLUMNAR])
def test_columnar_bundles_give_their_rows_both_ways(spark, kind, spec):
    bundles = _columnar_bundles(kind, spec)
    expected = _expected(bundles, spec)
    assert len(expected) == 3 * 9
    assert any(row["topic_sys_flag"] is None for row in expected)  # the block leaving it out
    rows = BatchRows(spark, bundles)
    assert _parsed(bundles, spec).to_pylist() == expected
    assert rows.table_rows(kind, spec).to_pylist() == expected
    assert _by_spark(rows, bundles, spec) == expected


@pytest.mark.parametrize(("kind", "spec"), COLUMNAR, ids=[s.name for _, s in COLUMNAR])
def test_both_forms_in_one_batch_keep_the_bundles_order(spark, kind, spec):
    """Row-form and columnar bundles of one table, interleaved: the Arrow parse lists the
    rows bundle by bundle; Spark's fallback gives the same rows (in another order)."""
    columnar, listed = _columnar_bundles(kind, spec), _bundles(kind, spec)
    bundles = pa.concat_tables(
        [t.slice(i, 1) for i in range(4) for t in (listed, columnar)]
    ).combine_chunks()
    expected = _expected(bundles, spec)
    got = _parsed(bundles, spec).to_pylist()
    assert got == expected
    rows = BatchRows(spark, bundles)

    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True)

    assert sorted(_by_spark(rows, bundles, spec), key=key) == sorted(expected, key=key)


def test_a_block_whose_arrays_differ_in_length_is_refused(spark):
    kind, spec = next((k, s) for k, s in COLUMNAR if s.name == "topic_base")
    block = {"broker_name": "g", "topic": ["a", "b"], "perm": [6]}
    bundles = pa.Table.from_pylist(
        [dict(zip(_NAMES, (kind, spec.name, "upsert", bundle_json([block]), None), strict=True))],
        _SCHEMA,
    )
    with pytest.raises(ValueError, match="differ in length"):
        bundle_rows(spec.name, bundles["row_json"][0].as_py())
    with pytest.raises(ValueError, match="differ in length"):
        BatchRows(spark, bundles).table_rows(kind, spec)
