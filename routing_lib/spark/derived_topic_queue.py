"""topic_queue_table derived per broker group from topic_base and topic_overlay (issue 36).

The writer (routing_lib/spark/delta_writer.py) commits a batch's topic_base rows
(`apply_base_changes`: each touched group's partition replaced) and topic_overlay rows first;
then every group whose base or overlay rows changed gets its topic_queue_table partition
replaced by

    effective(B, overlay) = present ? perm_op(B ∩ covered) : {}

read back from what the two tables hold after the batch (so a replayed batch derives the same
partitions). One commit (routing_lib/spark/group_files.py `replace_groups`) removes the
touched groups' files whole (no row of another group is read or rewritten) and adds one file
per present group. An expiry is a remove of that group's files and nothing added; a return
with the same table adds its partition back; a perm change rewrites its partition,
Arrow-computed.

Vectorised: the per-row work (which group's overlay applies, the perm op) is Arrow compute;
Python loops run over the touched groups, never over topics.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable

from routing_lib.core.overlay import PERM_READ, PERM_READ_WRITE, PERM_WRITE, PermOp
from routing_lib.read.arrow_filters import read_table
from routing_lib.spark.group_files import read_groups, replace_groups

# PermOp -> a small code, so the op applies per row by Arrow compute
_OP_CODES = {PermOp.ID: 0, PermOp.WIPE: 1, PermOp.RW: 2, PermOp.R: 3}


def effective_rows(base: pa.Table, overlays: list[dict[str, object]]) -> pa.Table:
    """topic_queue_table's rows of the groups in `base` (topic_base rows) under their overlay
    rows (a group without one has the trivial overlay: its base as it is)."""
    if base.num_rows == 0:
        return base
    by_group = {str(o["broker_name"]): o for o in overlays}
    names = pa.array(sorted(by_group), pa.string())
    present = pa.array([bool(by_group[g]["present"]) for g in names.to_pylist()], pa.bool_())
    codes = pa.array(
        [_OP_CODES[PermOp(by_group[g]["perm_op"])] for g in names.to_pylist()], pa.int8()
    )
    group_column = pc.cast(base.column("broker_name"), pa.string())
    index = pc.index_in(group_column, value_set=names)  # null: no overlay row (trivial)
    row_present = pc.fill_null(pc.take(present, index), True)
    keep = row_present
    for group, overlay in by_group.items():  # a split return under way: rare
        covered = overlay.get("covered")
        if covered is not None and overlay["present"]:
            outside = pc.invert(
                pc.is_in(pc.cast(base.column("topic"), pa.string()), pa.array(covered, pa.string()))
            )
            keep = pc.and_(keep, pc.invert(pc.and_(pc.equal(group_column, group), outside)))
    rows = base if pc.all(keep, skip_nulls=False).as_py() else base.filter(keep)  # no copy
    code = pc.fill_null(
        pc.take(
            codes, pc.index_in(pc.cast(rows.column("broker_name"), pa.string()), value_set=names)
        ),
        0,
    )
    perm = rows.column("perm")
    new_perm = pc.case_when(
        pc.make_struct(pc.equal(code, 1), pc.equal(code, 2), pc.equal(code, 3)),
        pc.bit_wise_and(perm, pa.scalar(~PERM_WRITE, perm.type)),
        pa.scalar(PERM_READ_WRITE, perm.type),
        pa.scalar(PERM_READ, perm.type),
        perm,
    )
    return rows.set_column(rows.schema.get_field_index("perm"), "perm", new_perm)


def derive_partitions(
    base: DeltaTable,
    overlay: DeltaTable,
    target: DeltaTable,
    location: str,
    groups: Collection[str],
    commit: CommitProperties,
    written: pa.Table | None = None,
) -> None:
    """Replace the groups' topic_queue_table partitions (`target`, at `location`) with their
    effective rows, in one commit (`commit`: the batch's txn action). `written`: topic_base
    rows this process has just committed as whole partitions (those groups are not read
    back: a cold start's 3 M rows are in memory already)."""
    if not groups:
        return
    wanted = sorted(groups)
    base_rows = _base_rows(base, wanted, written)
    overlay_rows = read_table(overlay, [("broker_name", "in", wanted)]).to_pylist()
    replace_groups(target, location, wanted, effective_rows(base_rows, overlay_rows), commit)


def _base_rows(base: DeltaTable, groups: list[str], written: pa.Table | None) -> pa.Table:
    """The groups' topic_base rows: those in `written` from memory, the others from their
    files only."""
    if written is None or written.num_rows == 0:
        return read_groups(base, groups)
    schema = pa.schema(base.schema().to_arrow())
    in_memory = set(pc.unique(written.column("broker_name")).to_pylist())
    unread = [g for g in groups if g not in in_memory]
    mine = (  # a cold start's whole partitions are all wanted: no copy of them
        written
        if in_memory <= set(groups)
        else written.filter(pc.is_in(written.column("broker_name"), pa.array(groups, pa.string())))
    )
    return pa.concat_tables(
        [
            read_groups(base, unread).select(schema.names).cast(schema),
            mine.select(schema.names).cast(schema),
        ]
    )


def _keys(rows: pa.Table) -> pa.ChunkedArray:
    """(broker_name, topic) as one string per row."""
    return pc.binary_join_element_wise(
        pc.cast(rows.column("broker_name"), pa.string()),
        pc.cast(rows.column("topic"), pa.string()),
        "\x00",
    )


def apply_base_changes(
    base: DeltaTable, location: str, changes: pa.Table, commit: CommitProperties
) -> pa.Table:
    """A batch's topic_base upserts and deletes (`op` + the columns; a delete the key only):
    each touched group's partition replaced by its rows without the changed keys, plus the
    upserts, in one commit (a group's partition is one file: a MERGE would copy it too).
    Returns the touched groups' rows as committed."""
    groups = {str(g) for g in pc.unique(changes.column("broker_name")).to_pylist()}
    current = read_groups(base, groups)
    schema = pa.schema(base.schema().to_arrow())
    kept = current.filter(
        pc.invert(pc.is_in(_keys(current), value_set=_keys(changes).combine_chunks()))
    )
    upserts = changes.filter(pc.equal(changes.column("op"), "upsert")).select(schema.names)
    rows = pa.concat_tables([kept.select(schema.names).cast(schema), upserts.cast(schema)])
    replace_groups(base, location, groups, rows, commit)
    return rows
