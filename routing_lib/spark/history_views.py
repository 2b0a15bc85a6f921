"""Spark temp views of the history tables that are derived, not stored (issue 36).

topic_route_history is derived from topic_base_changes and topic_overlay_changes
(read/route_history.py does it with delta-rs). `register_history_views` registers a temp
view `topic_route_history` with today's columns and rows, so Spark SQL written against the
table (history_recipes.py) reads it unchanged: the two change tables unioned, grouped by
broker_name (a (topic, group)'s versions need only its group's rows), and each group derived
by the pure core (`facts_of_rows` -> `NormalisedHistory` -> `topic_route_history_rows`) in
`applyInPandas`. Spark spreads the groups over its tasks; a group's rows are one pandas frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from routing_lib import storage
from routing_lib.core.catalog import (
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_ROUTE_HISTORY,
    spec,
)
from routing_lib.read.route_history import ChangeTables, history_rows

_KIND = "_change_kind"  # which change table a row of the union came from
_BASE, _OVERLAY = "base", "overlay"


def _derive_group(frame: pd.DataFrame) -> pd.DataFrame:
    """One broker group's change rows (both tables) -> its topic_route_history rows."""
    columns = list(spec(TOPIC_ROUTE_HISTORY).column_names)
    data = pa.Table.from_pandas(frame, preserve_index=False)  # NaN of a nullable int: null
    kinds = data[_KIND].to_pylist()
    rows = data.drop_columns([_KIND]).to_pylist()
    base = [r for r, kind in zip(rows, kinds, strict=True) if kind == _BASE]
    overlay = [r for r, kind in zip(rows, kinds, strict=True) if kind == _OVERLAY]
    derived = history_rows(ChangeTables(pa.Table.from_pylist(base), pa.Table.from_pylist(overlay)))
    return pd.DataFrame.from_records(derived, columns=columns)


def topic_route_history_frame(spark: Any, warehouse: str | Path) -> Any:
    """topic_route_history of `warehouse` as a Spark DataFrame, derived from its change
    tables."""
    from pyspark.sql import functions as F

    root = storage.spark_uri(
        warehouse if storage.is_remote(warehouse) else Path(warehouse).resolve()
    )
    base = spark.read.format("delta").load(f"{root}/{TOPIC_BASE_CHANGES}")
    overlay = spark.read.format("delta").load(f"{root}/{TOPIC_OVERLAY_CHANGES}")
    union = base.withColumn(_KIND, F.lit(_BASE)).unionByName(
        overlay.withColumn(_KIND, F.lit(_OVERLAY)), allowMissingColumns=True
    )
    return union.groupBy("broker_name").applyInPandas(
        _derive_group, schema=spec(TOPIC_ROUTE_HISTORY).ddl
    )


def register_history_views(spark: Any, warehouse: str | Path) -> None:
    """Temp view `topic_route_history` over `warehouse`'s change tables (replacing one an
    earlier call registered for another warehouse)."""
    topic_route_history_frame(spark, warehouse).createOrReplaceTempView(TOPIC_ROUTE_HISTORY)
