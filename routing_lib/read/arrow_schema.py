"""Arrow schemas of the catalog's tables (routing_lib/core/catalog.py), as Spark creates them:
INT is 32 bit, BIGINT 64 bit, every field nullable unless the catalog says otherwise. Writers
without Spark (delta-rs test warehouses, tools) build their Arrow tables with these."""

from __future__ import annotations

import pyarrow as pa

from routing_lib.core.catalog import ArrayOf, Column, ColumnType, Scalar, StructOf, TableSpec, spec

_SCALARS = {
    Scalar.STRING: pa.string(),
    Scalar.INT: pa.int32(),
    Scalar.BIGINT: pa.int64(),
    Scalar.BOOLEAN: pa.bool_(),
    Scalar.BINARY: pa.binary(),
}


def arrow_type(kind: ColumnType) -> pa.DataType:
    if isinstance(kind, ArrayOf):
        return pa.list_(arrow_type(kind.element))
    if isinstance(kind, StructOf):
        return pa.struct([arrow_field(f) for f in kind.fields])
    return _SCALARS[kind]


def arrow_field(column: Column) -> pa.Field:
    return pa.field(column.name, arrow_type(column.type), nullable=column.nullable)


def arrow_schema(table: str | TableSpec) -> pa.Schema:
    """The Arrow schema of a table of the catalog (by name, or its spec)."""
    table_spec = spec(table) if isinstance(table, str) else table
    return pa.schema([arrow_field(c) for c in table_spec.columns])
