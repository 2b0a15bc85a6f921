"""The rows a group's step hands the Delta writer: one typed vocabulary for both sides."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class RowKind(StrEnum):
    """What an output row of a step is; the writer commits each kind its own way."""

    CHANGE = "change"  # a route table row change (bundled)
    HISTORY = "history"  # a history or admin_events change (bundled)
    DEAD = "dead"  # one dead letter
    LATE = "late"  # one late event
    STATS = "stats"  # the step call's counts and the tables its rows write


class RowOp(StrEnum):
    UPSERT = "upsert"
    DELETE = "delete"
    CLOSE = "close"
    APPEND = "append"


class StepRow(NamedTuple):
    """One output row: for CHANGE and HISTORY a JSON array of rows (or keys, for a delete)
    sharing kind, table and op, so a 10 000-topic registration is one row, not 10 000."""

    kind: RowKind
    table: str | None
    op: RowOp | None
    row_json: str
    raw: bytes | None


WRITES = "writes"  # the stats key listing "kind/table" of the call's other rows

INTERNAL_ERROR = "internal error"  # the reason's prefix (routing_lib/metrics.py counts it)


def internal_error_reason(exc: BaseException) -> str:
    """The dead-letter reason of a record or event that raised where nothing should (stage
    one's validation, the step taking a row, the clock applying an event): not bad input
    (validation names that), so the exception is all there is to tell."""
    return f"{INTERNAL_ERROR}: {type(exc).__name__}: {str(exc)[:500]}"
