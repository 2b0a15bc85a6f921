"""Filtered delta-rs reads that work whatever string layout pyarrow reads a file with.

pyarrow 25 reads a Delta table's string columns from Parquet as `string_view` while the table's
schema says `string`, and it has no comparison kernel between the two: the DNF `filters` of
`DeltaTable.to_pyarrow_table` fail on any string column ("no kernel matching input types
(string, string_view)"). Comparing the column cast to `string` works for every layout, and
integer columns need no cast.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

Filter = tuple[str, str, Any]  # (column, op, value), as delta-rs filters

_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _condition(column: str, op: str, value: Any) -> pc.Expression:
    field = pc.field(column)
    sample = value[0] if op in ("in", "not in") and value else value
    if isinstance(sample, str):
        field = field.cast(pa.string())
    if op == "in":
        return field.isin(list(value))
    if op == "not in":
        return ~field.isin(list(value))
    return _OPERATORS[op](field, value)


def expression(filters: Sequence[Filter] | None) -> pc.Expression | None:
    """The conjunction of `filters` as a pyarrow expression (None: no filter)."""
    if not filters:
        return None
    conditions = [_condition(*f) for f in filters]
    combined = conditions[0]
    for condition in conditions[1:]:
        combined = combined & condition
    return combined


def read_table(
    delta: DeltaTable,
    filters: Sequence[Filter] | None = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """`delta.to_pyarrow_table(columns=..., filters=...)` with string-safe comparisons."""
    dataset = delta.to_pyarrow_dataset()
    return dataset.to_table(columns=columns, filter=expression(filters))
