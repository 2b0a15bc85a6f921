"""A broker group's topics as base + overlay (issue 36): what a fault changes is O(1).

RocketMQ's faults touch every queue data of a brokerName the same way: an expiry or an
unregister of the group's last address drops them all, an admin WIPE_WRITE_PERM clears the
write bit of each, ADD_WRITE_PERM sets each perm to RW, an acting-master group losing its
master wipes them. Stored per topic, each such fault costs as many rows as the group has
topics. Here a group's slice of topicQueueTable is

    effective = present ? perm_op(base ∩ covered) : {}

* `base` (B): the group's configured topic table, a TopicTable (a content reference in state);
  it changes only when a registration changes topics, or a DELETE_TOPIC removes one;
* the overlay: `present` (are the group's topics in topicQueueTable at all), `perm_op` (one of
  four perm maps, closed under composition), `covered` (None: every topic of B; else the names
  registered since a split registration's return, RocketMQ 5.1.4+'s chunks).

So an expiry, a return with the table the group left with, an unregister, an acting-master
wipe or promotion and an admin WIPE/ADD assign a new overlay: O(1). What cannot be written as
one group-wide op (a topic changed by a registration while the perm op is not ID) folds the
op into B once (`GroupTopics.with_effective`, the general case).

The values here are immutable: a change builds a new GroupTopics, so "did the topics change"
stays an identity test, as for TopicTable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from routing_lib.core.topic_table import EMPTY_TOPICS, QueueData, TopicTable

PERM_WRITE = 0x2
PERM_READ = 0x4
PERM_READ_WRITE = PERM_READ | PERM_WRITE


class PermOp(Enum):
    """A map of a queue data's perm applied to every topic of a group.

    ID leaves it; WIPE is WIPE_WRITE_PERM (`perm & ~2`, also the acting-master wipe); RW is
    ADD_WRITE_PERM (`perm = 6`); R (`perm = 4`) is what WIPE after RW gives. Any two compose
    to one of the four (tests/test_overlay.py proves it over every perm 0..7)."""

    ID = "ID"
    WIPE = "WIPE"
    RW = "RW"
    R = "R"

    def apply(self, perm: int) -> int:
        if self is PermOp.ID:
            return perm
        if self is PermOp.WIPE:
            return perm & ~PERM_WRITE
        if self is PermOp.RW:
            return PERM_READ_WRITE
        return PERM_READ

    def then(self, outer: PermOp) -> PermOp:
        """The op equal to applying `self`, then `outer`."""
        return compose(outer, self)

    def queue(self, queue: QueueData) -> QueueData:
        return QueueData(
            queue.read_queue_nums,
            queue.write_queue_nums,
            self.apply(queue.perm),
            queue.topic_sys_flag,
        )


# compose(outer, inner): outer ∘ inner. An outer RW or R sets the perm whatever came before;
# WIPE after RW or R leaves R; WIPE after WIPE is WIPE.
_COMPOSE: dict[tuple[PermOp, PermOp], PermOp] = {
    **{(PermOp.ID, inner): inner for inner in PermOp},
    **{(PermOp.RW, inner): PermOp.RW for inner in PermOp},
    **{(PermOp.R, inner): PermOp.R for inner in PermOp},
    (PermOp.WIPE, PermOp.ID): PermOp.WIPE,
    (PermOp.WIPE, PermOp.WIPE): PermOp.WIPE,
    (PermOp.WIPE, PermOp.RW): PermOp.R,
    (PermOp.WIPE, PermOp.R): PermOp.R,
}


def compose(outer: PermOp, inner: PermOp) -> PermOp:
    """The one PermOp p with p.apply(x) == outer.apply(inner.apply(x)) for every perm x."""
    return _COMPOSE[outer, inner]


@dataclass(frozen=True)
class Overlay:
    """What the group's faults made of its base: see the module doc."""

    present: bool = True
    perm_op: PermOp = PermOp.ID
    covered: frozenset[str] | None = None

    def is_trivial(self) -> bool:
        """effective == base: the state and rows look exactly as before issue 36."""
        return self.present and self.perm_op is PermOp.ID and self.covered is None


TRIVIAL = Overlay()
ABSENT = Overlay(present=False)


def effective_rows(
    base: dict[str, QueueData] | TopicTable, overlay: Overlay
) -> dict[str, QueueData]:
    """present ? perm_op(base ∩ covered) : {}, as a plain dict in the base's order (the
    derivation the readers of a base + overlay layout apply)."""
    if not overlay.present:
        return {}
    rows = base.rows() if isinstance(base, TopicTable) else base
    if overlay.covered is not None:
        covered = overlay.covered
        rows = {t: q for t, q in rows.items() if t in covered}
    if overlay.perm_op is PermOp.ID:
        return dict(rows)
    op = overlay.perm_op.queue
    return dict(zip(rows, map(op, rows.values()), strict=True))


class GroupTopics:
    """A group's base + overlay, immutable; `effective()` is its topicQueueTable slice (the
    base itself when the overlay is trivial, so identity tests keep working)."""

    __slots__ = ("base", "overlay", "_effective")

    def __init__(self, base: TopicTable = EMPTY_TOPICS, overlay: Overlay = TRIVIAL):
        self.base = base
        self.overlay = overlay
        self._effective: TopicTable | None = None

    def __repr__(self) -> str:
        return f"GroupTopics({len(self.base)} topics, {self.overlay})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupTopics):
            return NotImplemented
        return self.overlay == other.overlay and self.base == other.base

    __hash__ = None  # type: ignore[assignment]

    def effective(self) -> TopicTable:
        if self._effective is None:
            if not self.overlay.present:
                self._effective = EMPTY_TOPICS
            elif self.overlay.is_trivial():
                self._effective = self.base
            else:
                base, overlay = self.base, self.overlay
                names = base.names()
                if overlay.covered is not None:
                    names = [name for name in names if name in overlay.covered]
                self._effective = TopicTable.derived(lambda: effective_rows(base, overlay), names)
        return self._effective

    def size(self) -> int:
        """How many topics the slice holds (O(1) unless a split return is under way)."""
        if not self.overlay.present:
            return 0
        if self.overlay.covered is None:
            return len(self.base)
        return len(self.effective())

    # -- O(1) changes: a new overlay on the same base ---------------------------------------
    def removed(self) -> GroupTopics:
        """The group left topicQueueTable (expiry, unregister of its last address)."""
        if not self.overlay.present:
            return self
        return GroupTopics(self.base, ABSENT)

    def perm_changed(self, op: PermOp) -> GroupTopics:
        """`op` applied to every queue data the group holds (admin WIPE/ADD, acting master)."""
        overlay = self.overlay
        return GroupTopics(
            self.base, Overlay(overlay.present, compose(op, overlay.perm_op), overlay.covered)
        )

    def returned(self, op: PermOp) -> GroupTopics:
        """The whole base is in topicQueueTable again, under `op` (a registration whose every
        config, applied as `op` applies it, is exactly the base)."""
        return GroupTopics(self.base, Overlay(True, op, None))

    # -- O(changed topics) --------------------------------------------------------------------
    def without(self, topics: Iterable[str]) -> GroupTopics:
        """DELETE_TOPIC: the topics leave the base (whatever the overlay: gone from B, gone
        from perm_op(B ∩ covered))."""
        base = self.base.without(topics)
        return self if base is self.base else GroupTopics(base, self.overlay)

    def with_effective(self, table: TopicTable) -> GroupTopics:
        """The state whose effective slice is `table` (a registration's result): the same
        base under a new overlay when `table` is a part of it (a split registration's chunks
        after a return), else `table` becomes the base (the fold: any op is in its rows)."""
        if table is self.effective():
            return self
        if table is self.base:
            return GroupTopics(self.base, TRIVIAL)
        if table and self.base and table.rows().items() <= self.base.rows().items():
            covered = None if len(table) == len(self.base) else frozenset(table.names())
            return GroupTopics(self.base, Overlay(True, PermOp.ID, covered))
        return GroupTopics(table, TRIVIAL)


EMPTY_GROUP_TOPICS = GroupTopics()
