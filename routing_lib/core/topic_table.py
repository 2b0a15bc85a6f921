"""One group's slice of topicQueueTable as an immutable value with a lazily decoded blob.

A group with 10 000 topics is touched by every heartbeat and every registration, but its topics
change only when a dataVersion does. So the table is never changed in place: a change builds a
new TopicTable (copy on write). That makes "did the topics change?" an identity test (snapshots,
row diffs and history share the object for free), and lets the state codec hand back the very
blob it was given when nothing changed: a heartbeat never decodes it, an unchanged registration
only reads its names.

Blob layout: topic names joined by US, then RS, then the rows as a JSON list of
[readQueueNums, writeQueueNums, perm, topicSysFlag] in the same order. Topic names are
[%|a-zA-Z0-9_-], so the separators cannot clash.
"""

from __future__ import annotations

import json
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, ValuesView
from typing import ClassVar, NamedTuple, TypeVar, overload

from routing_lib.core.content import CONTENT

RS, US = "\x1e", "\x1f"
_T = TypeVar("_T")


class QueueData(NamedTuple):
    """One topic's row of topicQueueTable within a group: RocketMQ's QueueData minus the
    brokerName (the group the table belongs to). A tuple, so comparing two tables of 10 000
    topics (every diff and history step of a fault) runs in C rather than in a dataclass
    __eq__ per topic."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int


class AppliedRegistration(NamedTuple):
    """A registration a table was built by applying: its topic table's content reference and
    whether the write permission was wiped as it was applied (an acting master's prime slave).
    Applying it again to that table changes nothing (an application only sets rows, so
    applying it twice is applying it once)."""

    table_ref: str
    write_wiped: bool


class TopicTable(Mapping[str, QueueData]):
    __slots__ = ("_rows", "_blob", "_names", "_applied", "_derive")
    decodes: ClassVar[int] = 0  # blobs decoded in this process (tests count them)

    def __init__(
        self,
        rows: dict[str, QueueData] | None = None,
        *,
        blob: str | None = None,
        applied_registration: AppliedRegistration | None = None,
    ):
        self._rows = rows if rows is not None or blob is not None else {}
        self._blob = blob
        self._names: list[str] | None = None
        # rows computed on first use (a group's base under its overlay: core/overlay.py)
        self._derive: Callable[[], dict[str, QueueData]] | None = None
        self._applied = applied_registration

    @property
    def applied_registration(self) -> AppliedRegistration | None:
        """The registration whose every config this table holds as applied, when an
        application of it built this table (given at construction: `updated`); any other
        change builds a new table without it."""
        return self._applied

    @staticmethod
    def from_blob(blob: str) -> TopicTable:
        return TopicTable(None, blob=blob)

    @staticmethod
    def derived(rows: Callable[[], dict[str, QueueData]], names: list[str]) -> TopicTable:
        """A table whose names are known and whose rows are computed on first use: a step
        that only refreshes a heartbeat never computes them."""
        table = TopicTable({})
        table._rows, table._derive, table._names = None, rows, names
        return table

    # -- reading ---------------------------------------------------------------------------
    def _table(self) -> dict[str, QueueData]:
        if self._rows is None and self._derive is not None:
            self._rows, self._derive = self._derive(), None
        if self._rows is None:
            TopicTable.decodes += 1
            rows = json.loads(self._blob.partition(RS)[2]) if self._blob else []
            self._rows = dict(zip(self.names(), map(QueueData._make, rows), strict=True))
        return self._rows

    def names(self) -> list[str]:
        """The topic names, without decoding the rows."""
        if self._rows is not None:
            return list(self._rows)
        if self._names is None:
            head = self._blob.partition(RS)[0] if self._blob else ""
            self._names = head.split(US) if head else []
        return self._names

    def __getitem__(self, topic: str) -> QueueData:
        return self._table()[topic]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __contains__(self, topic: object) -> bool:
        return topic in self._table()

    def rows(self) -> Mapping[str, QueueData]:
        """The decoded rows, topic -> QueueData, in the table's order (read only): lookups
        and comparisons over the whole table run on the dict itself."""
        return self._table()

    # Mapping's mixins would go through __getitem__ once per topic: use the dict's own views.
    def items(self) -> ItemsView[str, QueueData]:
        return self._table().items()

    def values(self) -> ValuesView[QueueData]:
        return self._table().values()

    @overload
    def get(self, topic: str, /) -> QueueData | None: ...
    @overload
    def get(self, topic: str, default: QueueData | _T, /) -> QueueData | _T: ...
    def get(self, topic: str, default: object = None) -> object:
        return self._table().get(topic, default)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, TopicTable):
            if self._blob is not None and self._blob == other._blob:
                return True
            return self._table() == other._table()  # dict equality, in C
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # unhashable, like the dict it stands for

    def blob(self) -> str:
        """The encoded form: the blob this table was decoded from, if it never changed."""
        if self._blob is None:
            rows = self._table()
            # a QueueData is a tuple: JSON writes it as the array
            # [readQueueNums, writeQueueNums, perm, topicSysFlag]
            self._blob = US.join(rows) + RS + json.dumps(list(rows.values()), separators=(",", ":"))
        return self._blob

    def content_ref(self) -> str | None:
        """The content reference of this table's blob, when the content store knows it."""
        return CONTENT.ref_of(self._blob) if self._blob is not None else None

    # -- copy on write -----------------------------------------------------------------------
    def updated(
        self,
        changes: Mapping[str, QueueData],
        applied_registration: AppliedRegistration | None = None,
    ) -> TopicTable:
        """The table with `changes` applied; itself when they change nothing (a re-sent
        registration chunk), so an unchanged table keeps its identity and its blob. A new
        table built by applying a whole registration carries it (`applied_registration`)."""
        if not changes:
            return self
        table = self._table()
        if changes.items() <= table.items():  # every change already there (compared in C)
            return self
        return TopicTable({**table, **changes}, applied_registration=applied_registration)

    def without(self, topics: Iterable[str]) -> TopicTable:
        drop = set(topics)
        if not drop:
            return self
        return TopicTable({t: q for t, q in self._table().items() if t not in drop})

    def mapped(self, change: Callable[[QueueData], QueueData]) -> TopicTable:
        return TopicTable({t: change(q) for t, q in self._table().items()})


EMPTY_TOPICS = TopicTable({})
