"""The writer's Arrow parse of the step's bundles (routing_lib/spark/batch_rows.py) against
Spark's `from_json` + explode, which it replaces: the same rows for every table the writer
MERGEs, and Spark's rows where pyarrow's reader refuses the text."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from routing_lib.core.catalog import ArrayOf, ColumnType, Scalar, StructOf, TableSpec
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
    return exploded(rows.frame(bundles), spec.ddl).toArrow().to_pylist()


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
