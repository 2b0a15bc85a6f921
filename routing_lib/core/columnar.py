"""Columnar bundles: the step's rows of topic_base and topic_base_changes as column arrays
(issue 36, the cold start).

A 10 000-topic group's first registration writes 10 000 topic_base rows and 10 000
topic_base_changes rows. As JSON row objects (the other tables' bundles: a JSON array of rows,
core/rows.py) that is ~20 000 dicts built in Python and ~3.8 MB of text per group, most of it
column names and the columns a transition's rows share; a cold 300-group fleet moved ~1.1 GB
of it from the Python workers through the JVM to the writer. Here such a bundle is

    {"blocks": [block, ...]}

and a block is the rows of one transition (topic_base: of one step call's net change): its
shared columns once, as scalars, and its row columns (`ROW_COLUMNS`) as arrays of one length,
element i of each array belonging to row i. A column a block leaves out is absent from every
row of it (a topic_base delete names its keys only, as in the row form). The rows are the
blocks' rows in order, each block's in its arrays' order: what the row form would list.

Readers: `bundle_rows` (pure Python: tests, tools) and the writer's Arrow and Spark parses
(routing_lib/spark/batch_rows.py), which take either form, told apart by the text's first
character (an object here, an array in the row form).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic_core import PydanticSerializationError, to_json

from routing_lib.core.catalog import TOPIC_BASE, TOPIC_BASE_CHANGES
from routing_lib.core.tables import Row

BLOCKS = "blocks"
_QUEUE_COLUMNS = ("read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag")

# The tables whose bundles the step writes in columnar form, and their row columns (arrays in
# a block; the first is in every block). Every other column of the table is shared.
ROW_COLUMNS: dict[str, tuple[str, ...]] = {
    TOPIC_BASE: ("topic", *_QUEUE_COLUMNS),
    TOPIC_BASE_CHANGES: ("topic", "in_base", *_QUEUE_COLUMNS),
}


def is_columnar(row_json: str) -> bool:
    """A columnar bundle is a JSON object; the row form is an array."""
    return row_json.startswith("{")


def bundle_json(blocks: Sequence[Row]) -> str:
    """The bundle of these blocks, as the step hands it to the writer."""
    bundle = {BLOCKS: blocks}
    try:
        return to_json(bundle).decode()  # pydantic-core: several times faster than json.dumps
    except PydanticSerializationError:  # e.g. a lone surrogate, which json.dumps escapes
        return json.dumps(bundle)


def block_rows(table: str, block: Row) -> list[Row]:
    """The rows of one block."""
    row_columns = [c for c in ROW_COLUMNS[table] if c in block]
    shared = {c: v for c, v in block.items() if c not in ROW_COLUMNS[table]}
    arrays = [block[c] for c in row_columns]
    try:
        rows = list(zip(*arrays, strict=True))
    except ValueError:
        raise ValueError(f"a {table} block's row columns differ in length") from None
    return [{**shared, **dict(zip(row_columns, values, strict=True))} for values in rows]


def bundle_rows(table: str, row_json: str) -> list[Row]:
    """The rows of a bundle of either form (JSON text as the step writes it)."""
    bundle = json.loads(row_json)
    if isinstance(bundle, list):
        return bundle
    return [row for block in bundle[BLOCKS] for row in block_rows(table, block)]
