"""The catalog as Markdown: the generated part of docs/tables.md (a test keeps it in step).

python -m routing_lib.core.catalog_doc --sync docs/tables.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from routing_lib.core.catalog import CATALOG, TableSpec, spark_type

BEGIN = "<!-- BEGIN catalog: generated from routing_lib/core/catalog.py, do not edit -->"
END = "<!-- END catalog -->"


def _names(columns: tuple[str, ...]) -> str:
    return ", ".join(f"`{c}`" for c in columns)


def _summary_row(spec: TableSpec) -> str:
    cells = [
        f"`{spec.name}`",
        spec.family.value,
        spec.write_mode.value,
        _names(spec.keys),
        _names(spec.identity),
        _names(spec.partition_by),
        ", ".join(r.value for r in sorted(spec.readers)),
    ]
    return "| " + " | ".join(cells) + " |"


def _columns(spec: TableSpec) -> list[str]:
    lines = [f"### `{spec.name}`", "", spec.doc + ("" if not spec.optional else " (optional)")]
    lines += ["", "| column | type |", "|---|---|"]
    lines += [
        f"| `{c.name}` | {spark_type(c.type)}{'' if c.nullable else ' NOT NULL'} |"
        for c in spec.columns
    ]
    return [*lines, ""]


def markdown() -> str:
    """The generated part: one summary row per table, then each table's columns."""
    lines = [
        BEGIN,
        "",
        "| table | family | write | keys | identity | partitioned by | read by |",
        "|---|---|---|---|---|---|---|",
        *(_summary_row(spec) for spec in CATALOG),
        "",
    ]
    for spec in CATALOG:
        lines += _columns(spec)
    return "\n".join([*lines, END])


def synced(text: str) -> str:
    """`text` with its generated part replaced by the current one."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + markdown() + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sync", type=Path, required=True, help="the Markdown file to update")
    path = parser.parse_args().sync
    path.write_text(synced(path.read_text()))
    print(f"updated {path}")


if __name__ == "__main__":
    main()
