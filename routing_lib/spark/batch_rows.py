"""A micro-batch's step output on the driver: one Spark action, then each table's rows parsed
in Arrow (issue 36, the cold start).

The step leaves Spark as bundles: one row per (kind, table, op) of a step call whose
`row_json` is a JSON array of the table's rows (routing_lib/core/rows.py). The writer used to
persist the batch and run one Spark job per table (filter, `from_json`, explode, collect):
on a cold start, every one of a dozen jobs scanned the whole cached output (~1 GB of JSON for
300 x 10 000 topics, 3 M topic_base rows and as many change rows) on 2 cores. Now the batch
is collected once (`collect`: the stateful plan runs once, nothing is cached), and a table's
bundles become one Arrow table by pyarrow's JSON reader (C++, multi-threaded, explicit
schema): each bundle is wrapped as one line `{"op": ..., "r": [...]}` (JSON text has no raw
newline), the lines read, the `r` lists flattened with their op beside each row.

Exactness: pyarrow's reader refuses some text Spark's `from_json` takes (a lone surrogate
escape, which Spark turns into '?'; a value out of an INT's range, which Spark makes null).
A table whose bundles it refuses is parsed by Spark as before, from the collected rows
(`spark.createDataFrame`), so every table holds what the Spark path would have written.
Dead letters and late events (their raw bytes, rare) keep the Spark path the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from routing_lib.core.catalog import TableSpec
from routing_lib.core.columnar import BLOCKS, ROW_COLUMNS
from routing_lib.core.rows import RowKind
from routing_lib.read.arrow_schema import arrow_field
from routing_lib.spark.stateful import OUTPUT_SCHEMA

# the text one call of the JSON reader parses (its blocks parsed on threads)
_PART_BYTES = 64 << 20
# a block of the JSON reader holds whole lines; one line is one step call's bundle (a
# 10 000-topic group's rows: a few MB)
_MIN_BLOCK_BYTES = 16 << 20


@dataclass(frozen=True)
class BatchRows:
    """Every output row of one micro-batch (OUTPUT_SCHEMA's columns), on the driver."""

    spark: SparkSession
    rows: pa.Table

    @classmethod
    def collect(cls, batch: DataFrame) -> BatchRows:
        """One Spark action: the stateful plan runs and its rows come to the driver."""
        return cls(batch.sparkSession, batch.toArrow())

    def stats_json(self) -> list[str]:
        stats = self._of(RowKind.STATS)
        return [str(text) for text in stats.column("row_json").to_pylist()]

    def table_rows(self, kind: RowKind, spec: TableSpec) -> pa.Table:
        """The table's rows of the batch: op + the table's columns, one row per array element
        of its bundles (what `from_json` + explode made of them)."""
        try:
            # read in parts of about _PART_BYTES of text: the copies the reader needs (the
            # bundles selected, their lines) stay that small whatever the batch
            parts = [_parsed(part, spec) for part in self._parts(kind, spec.name)]
        except pa.ArrowException:  # text pyarrow's reader refuses: Spark's from_json reads it
            return exploded(self.frame(self._of(kind, spec.name)), spec).toArrow()
        if not parts:
            return _parsed(self._of(kind, spec.name), spec)  # no bundle: the empty table
        return pa.concat_tables(parts)

    def of_kind(self, kind: RowKind) -> DataFrame:
        """The rows of one kind as a Spark DataFrame (the Spark path of the appended tables)."""
        return self.frame(self._of(kind))

    def frame(self, rows: pa.Table) -> DataFrame:
        return self.spark.createDataFrame(rows.to_pandas(), OUTPUT_SCHEMA)

    def _of(self, kind: RowKind, table: str | None = None) -> pa.Table:
        return self.rows.filter(_selected(self.rows, kind, table))

    def _parts(self, kind: RowKind, table: str) -> Iterator[pa.Table]:
        """The table's bundles in parts of about _PART_BYTES of text or less (a bigger bundle
        alone). Record batch by record batch, and a batch in zero-copy slices: selecting
        rows copies only those (a take on the whole column would copy all of it)."""
        for batch in self.rows.to_batches():
            keep = _selected(batch, kind, table)
            sizes = pc.if_else(keep, pc.binary_length(batch.column("row_json")), 0)
            held = np.cumsum(np.nan_to_num(sizes.to_numpy(zero_copy_only=False)))
            start = 0
            while start < batch.num_rows:
                base = held[start - 1] if start else 0
                # the rows up to the part's size, at least one
                end = max(int(np.searchsorted(held, base + _PART_BYTES, "right")), start + 1)
                part = batch.slice(start, end - start).filter(keep.slice(start, end - start))
                if part.num_rows:
                    yield pa.Table.from_batches([part])
                start = end


def _selected(rows: pa.Table | pa.RecordBatch, kind: RowKind, table: str | None) -> pa.Array:
    keep = pc.equal(rows.column("kind"), kind.value)
    if table is not None:
        keep = pc.and_(keep, pc.equal(rows.column("table"), table))
    return pc.fill_null(keep, False)


def _parsed(bundles: pa.Table, spec: TableSpec) -> pa.Table:
    fields = [arrow_field(c) for c in spec.columns]
    out = pa.schema([pa.field("op", pa.string()), *fields])
    if bundles.num_rows == 0:
        return out.empty_table()
    ops = bundles.column("op").combine_chunks()
    # large_string: a cold start's bundles of one table may pass 2 GB
    texts = bundles.column("row_json").cast(pa.large_string()).combine_chunks()
    row_columns = ROW_COLUMNS.get(spec.name, ())
    # {"op":<op as JSON>,"r":<the bundle's array>}\n, one line per bundle; a columnar bundle
    # (an object: core/columnar.py) as "c" instead
    op_json = pa.array([json.dumps(op) for op in ops.to_pylist()], pa.large_string())
    key: pa.Array | pa.Scalar = _large(',"r":')
    if row_columns:
        key = pc.if_else(pc.starts_with(texts, "{"), _large(',"c":'), key)
    lines = pc.binary_join_element_wise(
        *(_large('{"op":'), op_json, key, texts, _large("}\n"), _large(""))
    )
    # the lines' characters, one after the other, are the reader's input: no copy
    offsets = pa.Array.from_buffers(pa.int64(), len(lines) + 1, [None, lines.buffers()[1]])
    first, last = offsets[lines.offset].as_py(), offsets[lines.offset + len(lines)].as_py()
    text = lines.buffers()[2][first:last]
    longest = pc.max(pc.binary_length(lines)).as_py()
    wrapper = [pa.field("op", pa.string()), pa.field("r", pa.list_(pa.struct(fields)))]
    if row_columns:
        block = pa.struct(
            [pa.field(f.name, pa.list_(f.type)) if f.name in row_columns else f for f in fields]
        )
        wrapper.append(pa.field("c", pa.struct([pa.field(BLOCKS, pa.list_(block))])))
    parsed = pj.read_json(
        pa.BufferReader(text),
        read_options=pj.ReadOptions(block_size=max(_MIN_BLOCK_BYTES, 2 * longest)),
        parse_options=pj.ParseOptions(
            explicit_schema=pa.schema(wrapper), unexpected_field_behavior="ignore"
        ),
    )
    op = parsed.column("op").combine_chunks()
    parts = [_listed_rows(parsed.column("r").combine_chunks(), fields)]
    if row_columns:
        (blocks,) = parsed.column("c").combine_chunks().flatten()
        if blocks.null_count < len(blocks):  # a columnar bundle
            parts.append(_block_rows(blocks, fields, row_columns))
    parts = [part for part in parts if part[0].num_rows]
    if not parts:
        return out.empty_table()
    if len(parts) == 1:
        rows, line = parts[0]
    else:  # both forms: the rows in the order of their bundles (a stable sort by bundle)
        rows = pa.concat_tables([rows for rows, _ in parts])
        line = pa.concat_arrays([line for _, line in parts])
        order = pc.sort_indices(line)
        rows, line = rows.take(order), line.take(order)
    return rows.add_column(0, out.field("op"), pc.take(op, line))


def _listed_rows(lists: pa.ListArray, fields: list[pa.Field]) -> tuple[pa.Table, pa.Array]:
    """The rows of row-form bundles (a list of row structs each, null for a columnar one),
    and the bundle of each row."""
    flat = pc.list_flatten(lists)
    columns = flat.flatten() if len(flat) else [pa.array([], f.type) for f in fields]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields)), pc.list_parent_indices(lists)


def _block_rows(
    blocks: pa.ListArray, fields: list[pa.Field], row_columns: tuple[str, ...]
) -> tuple[pa.Table, pa.Array]:
    """The rows of columnar bundles (a list of blocks each, null for a row-form one): a row
    column's arrays flattened, a shared column repeated for each row of its block; and the
    bundle of each row."""
    bundle_of_block = pc.list_parent_indices(blocks)
    flat = pc.list_flatten(blocks)
    by_name = dict(zip([f.name for f in flat.type], flat.flatten(), strict=True))
    counted = by_name[row_columns[0]]  # in every block: its length is the block's rows
    if counted.null_count:
        raise ValueError(f"a columnar block without {row_columns[0]}")
    block_of_row = pc.list_parent_indices(counted)
    lengths = pc.list_value_length(counted)
    columns = []
    for f in fields:
        values = by_name[f.name]
        if f.name not in row_columns:
            columns.append(pc.take(values, block_of_row))
            continue
        if values.null_count:  # left out of a block: null in each of its rows
            starts = np.concatenate([[0], np.cumsum(lengths.to_numpy())]).astype(np.int32)
            nulls = pa.ListArray.from_arrays(pa.array(starts), pa.nulls(len(block_of_row), f.type))
            values = pc.if_else(pc.is_null(values), nulls, values)
        if not pc.all(pc.equal(pc.list_value_length(values), lengths), min_count=0).as_py():
            raise ValueError(f"a columnar block's {f.name} and {row_columns[0]} differ in length")
        columns.append(pc.list_flatten(values))
    rows = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    return rows, pc.take(bundle_of_block, block_of_row)


def _large(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


def exploded(bundles: DataFrame, spec: TableSpec) -> DataFrame:
    """(op, JSON text) bundles -> one (op, columns...) row per row of the bundle: an array of
    rows, or for a table with columnar bundles also an object of blocks (core/columnar.py)."""
    schema = T.StructType.fromDDL(spec.ddl)
    assert isinstance(schema, T.StructType)
    rows_type = T.ArrayType(schema)
    row_columns = ROW_COLUMNS.get(spec.name, ())
    if not row_columns:
        return _exploded_rows(bundles, rows_type)
    columnar = F.col("row_json").startswith("{")
    listed = _exploded_rows(bundles.where(~columnar), rows_type)
    fields = schema.fields
    block = T.StructType(
        [
            T.StructField(f.name, T.ArrayType(f.dataType) if f.name in row_columns else f.dataType)
            for f in fields
        ]
    )
    blocks = bundles.where(columnar).select(
        "op",
        F.explode(
            F.from_json("row_json", T.StructType([T.StructField(BLOCKS, T.ArrayType(block))]))[
                BLOCKS
            ]
        ).alias("b"),
    )
    # a row column's i-th element; a column left out of a block is null ([i] of a null array)
    rows = blocks.select("op", "b", F.posexplode(f"b.{row_columns[0]}").alias("i", "_first"))
    columns = [
        F.col(f"b.{f.name}")[F.col("i")].alias(f.name)
        if f.name in row_columns
        else F.col(f"b.{f.name}").alias(f.name)
        for f in fields
    ]
    # the row form's bundles first: the order of the rows across forms is not kept here
    return listed.unionByName(rows.select("op", *columns))


def _exploded_rows(bundles: DataFrame, rows_type: T.ArrayType) -> DataFrame:
    return bundles.select("op", F.explode(F.from_json("row_json", rows_type)).alias("r")).select(
        "op", "r.*"
    )
