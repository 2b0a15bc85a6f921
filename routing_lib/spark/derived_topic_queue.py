"""topic_queue_table derived per broker group from topic_base and topic_overlay (issue 36).

The writer (routing_lib/spark/delta_writer.py) commits a batch's topic_base and topic_overlay
rows first; then every group whose base or overlay rows changed gets its topic_queue_table
partition replaced by

    effective(B, overlay) = present ? perm_op(B ∩ covered) : {}

read back from what the two tables hold after the batch (so a replayed batch derives the same
partitions). One `write_deltalake(mode="overwrite", predicate="broker_name IN (...)")` commit:
delta-rs removes the touched partitions' files whole (the predicate is on the partition
column: no row of another group is read or rewritten) and adds one file per present group.
An expiry is a remove of that group's files and nothing added; a return with the same table
adds its partition back; a perm change rewrites its partition, Arrow-computed.

Vectorised: the per-row work (which group's overlay applies, the perm op) is Arrow compute;
Python loops run over the touched groups, never over topics.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake

from routing_lib.core.overlay import PERM_READ, PERM_READ_WRITE, PERM_WRITE, PermOp
from routing_lib.read.arrow_filters import read_table

# PermOp -> a small code, so the op applies per row by Arrow compute
_OP_CODES = {PermOp.ID: 0, PermOp.WIPE: 1, PermOp.RW: 2, PermOp.R: 3}


def sql_string(value: str) -> str:
    """A SQL string literal (a quote in a group's name doubled)."""
    return "'" + value.replace("'", "''") + "'"


def groups_predicate(groups: Collection[str]) -> str:
    """The delta-rs predicate selecting the groups' partitions."""
    return "broker_name IN ({})".format(", ".join(sql_string(g) for g in sorted(groups)))


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
    rows = base.filter(keep)
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
    groups: Collection[str],
    commit: CommitProperties,
) -> None:
    """Replace the groups' topic_queue_table partitions with their effective rows, in one
    commit (`commit`: the batch's txn action)."""
    if not groups:
        return
    wanted = sorted(groups)
    pruned = base.to_pyarrow_dataset(file_pruning_predicate=groups_predicate(wanted))
    base_rows = pruned.to_table()  # the touched groups' partitions only
    overlay_rows = read_table(overlay, [("broker_name", "in", wanted)]).to_pylist()
    schema = pa.schema(target.schema().to_arrow())
    rows = effective_rows(base_rows, overlay_rows).select(schema.names).cast(schema)
    write_deltalake(
        target, rows, mode="overwrite", predicate=groups_predicate(wanted), commit_properties=commit
    )
