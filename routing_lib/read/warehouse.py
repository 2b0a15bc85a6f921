"""Load the route tables of a warehouse with delta-rs (no JVM, no Spark)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from routing_lib.core.dump import canonical_dump
from routing_lib.core.tables import PROGRESS, ROUTE_TABLES, Row


class WarehouseError(Exception):
    """The warehouse is missing, or is not a routelake warehouse of Delta tables."""


@dataclass(frozen=True)
class RouteSnapshot:
    tables: dict[str, list[Row]]
    versions: dict[str, int]  # Delta table version of each table read
    watermark: int | None  # of the last published batch; None before the first one

    def dump(self) -> dict:
        return canonical_dump(self.tables, self.watermark)


def open_table(warehouse: str | Path, table: str) -> DeltaTable:
    root = Path(warehouse)
    if not root.is_dir():
        raise WarehouseError(f"warehouse {root} does not exist")
    try:
        return DeltaTable(str(root / table))
    except TableNotFoundError:
        raise WarehouseError(
            f"{root / table} is not a Delta table: is {root} a routelake warehouse "
            "(run `routectl backfill` or `routectl run` first)?") from None


def table_versions(warehouse: str | Path) -> dict[str, int]:
    return {t: open_table(warehouse, t).version() for t in (*ROUTE_TABLES, PROGRESS)}


def load_snapshot(warehouse: str | Path) -> RouteSnapshot:
    tables, versions = {}, {}
    for table in ROUTE_TABLES:
        delta = open_table(warehouse, table)
        versions[table] = delta.version()
        tables[table] = delta.to_pyarrow_table().to_pylist()
    progress = open_table(warehouse, PROGRESS)
    versions[PROGRESS] = progress.version()
    rows = progress.to_pyarrow_table(columns=["batch_id", "watermark"]).to_pylist()
    watermark = max(rows, key=lambda r: r["batch_id"])["watermark"] if rows else None
    return RouteSnapshot(tables, versions, watermark)
