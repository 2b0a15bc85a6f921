"""The table catalog: every Delta table of a routelake warehouse, once.

Each table's name, columns, key and identity columns, partitioning, how the writer commits it
and who reads it. The other modules derive from here: the DDL the job creates tables with
(`TableSpec.ddl`), the writer's per-table plans, housekeeping's table list, the readers' table
lists and the table list of docs/tables.md. Pure Python on purpose (core stays free of Spark
and Arrow): a Spark DDL string is plain text and is spelled here; the Arrow schemas are made at
the edge, in routing_lib/read/arrow_schema.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from routing_lib.core.rows import RowKind


class Scalar(StrEnum):
    """A column's scalar type, spelled as in Spark SQL DDL."""

    STRING = "STRING"
    INT = "INT"  # 32 bit
    BIGINT = "BIGINT"  # 64 bit: epoch milliseconds, ids, counts
    BOOLEAN = "BOOLEAN"
    BINARY = "BINARY"


@dataclass(frozen=True)
class ArrayOf:
    element: ColumnType


@dataclass(frozen=True)
class StructOf:
    fields: tuple[Column, ...]


ColumnType = Scalar | ArrayOf | StructOf


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    # Every column is nullable today: the tables were created from DDL without NOT NULL, and
    # a key column can be null (a KV namespace's own row has key NULL).
    nullable: bool = True


class Family(StrEnum):
    ROUTE = "route"  # the current State(W) of one NameServer table
    HISTORY = "history"  # event-time history: intervals, events, the admin log
    SIDE = "side"  # what the job set aside: dead letters, late events
    PROGRESS = "progress"  # one row per published batch


class WriteMode(StrEnum):
    """How the writer (routing_lib/spark/delta_writer.py) commits a batch's rows."""

    MERGE = "merge"  # MERGE on the key (route tables) or the identity (history tables)
    APPEND = "append"  # appended as they come


class Reader(StrEnum):
    """Who reads a table, besides housekeeping (which compacts every table)."""

    DUMP = "dump"  # read/warehouse.py: routectl dump, the lookup's first load, as-of's watermark
    LOOKUP = "lookup"  # routing_lib/lookup: the served route snapshot, pinned by progress
    HISTORY = "history"  # read/history.py: routectl as-of / topic and broker history
    RECIPES = "recipes"  # history_recipes.py: the analysts' recipes
    PLOT = "plot"  # history_plot.py: routectl history plot
    CONSOLE = "console"  # routing_lib/console: the web console
    JOB = "job"  # the streaming job itself: the admin log and DELETE_TOPIC's fan-out


@dataclass(frozen=True)
class TableSpec:
    name: str
    family: Family
    columns: tuple[Column, ...]
    write_mode: WriteMode
    # The step's output rows that carry this table's rows (None: the writer makes them).
    row_kind: RowKind | None
    readers: frozenset[Reader]
    # Route table: the MERGE key (one row per key). Interval history table: the key whose
    # versions never overlap in time.
    keys: tuple[str, ...] = ()
    # History table: the columns identifying one row, the MERGE condition.
    identity: tuple[str, ...] = ()
    # Interval history table: the columns a `close` sets.
    close_columns: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    # A warehouse written by an older version of the job may lack it: read as empty.
    optional: bool = False
    doc: str = ""
    # Not stored: its rows are derived from these stored tables when read (issue 36's
    # topic_route_history from the group layout's change tables).
    derived_from: tuple[str, ...] = ()

    @property
    def stored(self) -> bool:
        return not self.derived_from

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def ddl(self) -> str:
        """The columns as a Spark DDL string ("name TYPE, ...")."""
        return ", ".join(_column_ddl(c, " ") for c in self.columns)


def spark_type(kind: ColumnType) -> str:
    """A column type in Spark SQL DDL."""
    if isinstance(kind, ArrayOf):
        return f"ARRAY<{spark_type(kind.element)}>"
    if isinstance(kind, StructOf):
        return "STRUCT<{}>".format(", ".join(_column_ddl(f, ": ") for f in kind.fields))
    return kind.value


def _column_ddl(column: Column, separator: str) -> str:
    not_null = "" if column.nullable else " NOT NULL"
    return f"{column.name}{separator}{spark_type(column.type)}{not_null}"


def _columns(*spec: tuple[str, ColumnType]) -> tuple[Column, ...]:
    return tuple(Column(name, kind) for name, kind in spec)


STRING, INT, BIGINT, BOOLEAN = Scalar.STRING, Scalar.INT, Scalar.BIGINT, Scalar.BOOLEAN

# ---- names --------------------------------------------------------------------------------------

TOPIC_QUEUE = "topic_queue_table"
BROKER_ADDR = "broker_addr_table"
CLUSTER_ADDR = "cluster_addr_table"
BROKER_LIVE = "broker_live_table"
FILTER_SERVER = "filter_server_table"
KV_CONFIG = "kv_config_table"
DEAD_LETTER = "dead_letter_table"
LATE_EVENT = "late_event_table"
PROGRESS = "route_progress"
TOPIC_ROUTE_HISTORY = "topic_route_history"
BROKER_MEMBERSHIP_HISTORY = "broker_membership_history"
CLUSTER_MEMBERSHIP_HISTORY = "cluster_membership_history"
BROKER_LIVENESS_EVENTS = "broker_liveness_events"
ADMIN_EVENTS = "admin_events"
# issue 36: the group-level layout (a group's base topic table + one overlay row; their changes)
TOPIC_BASE = "topic_base"
TOPIC_OVERLAY = "topic_overlay"
TOPIC_BASE_CHANGES = "topic_base_changes"
TOPIC_OVERLAY_CHANGES = "topic_overlay_changes"

# ---- the tables -----------------------------------------------------------------------------

_DATA_VERSION = StructOf(
    _columns(("state_version", BIGINT), ("timestamp", BIGINT), ("counter", BIGINT))
)
_ROUTE_READERS = frozenset({Reader.DUMP, Reader.LOOKUP})
_HISTORY_READERS = frozenset({Reader.HISTORY, Reader.RECIPES, Reader.PLOT, Reader.CONSOLE})


def _route(
    name: str,
    keys: tuple[str, ...],
    *columns: tuple[str, ColumnType],
    doc: str,
    readers: frozenset[Reader] = frozenset(),
    optional: bool = False,
    partition_by: tuple[str, ...] = (),
    row_kind: RowKind | None = RowKind.CHANGE,
) -> TableSpec:
    return TableSpec(
        name,
        Family.ROUTE,
        _columns(*columns),
        WriteMode.MERGE,
        row_kind,
        _ROUTE_READERS | readers,
        keys=keys,
        optional=optional,
        partition_by=partition_by,
        doc=doc,
    )


ROUTE_SPECS = (
    _route(
        TOPIC_QUEUE,
        ("topic", "broker_name"),
        ("topic", STRING),
        ("broker_name", STRING),
        ("read_queue_nums", INT),
        ("write_queue_nums", INT),
        ("perm", INT),
        ("topic_sys_flag", INT),
        # the console reads the served snapshot's topics; the job fans DELETE_TOPIC out to
        # the groups holding the topic in the published table
        readers=frozenset({Reader.CONSOLE, Reader.JOB}),
        # issue 36: a group's rows are its partition, replaced by file-level actions (an
        # expiry removes its files; nothing else is rewritten)
        partition_by=("broker_name",),
        # the step writes none of its rows: the writer derives the touched groups' partitions
        # from topic_base and topic_overlay after committing them
        row_kind=None,
        doc="topicQueueTable: one row per (topic, brokerName), derived from topic_base and "
        "topic_overlay per group",
    ),
    _route(
        BROKER_ADDR,
        ("broker_name", "broker_id"),
        ("broker_name", STRING),
        ("broker_id", BIGINT),
        ("broker_addr", STRING),
        ("cluster", STRING),
        ("enable_acting_master", BOOLEAN),
        ("zone_name", STRING),
        readers=frozenset({Reader.CONSOLE}),
        doc="brokerAddrTable: one row per (brokerName, brokerId)",
    ),
    _route(
        CLUSTER_ADDR,
        ("cluster_name", "broker_name"),
        ("cluster_name", STRING),
        ("broker_name", STRING),
        readers=frozenset({Reader.CONSOLE}),
        doc="clusterAddrTable: one row per (cluster, brokerName)",
    ),
    # brokerLiveTable and filterServerTable are keyed by (cluster, address) in RocketMQ; each
    # brokerName group writes its own rows, so one address registered under two brokerNames
    # (a broker renamed in place) is two rows here, never two MERGE source rows of one key.
    # Readers show one per (cluster, address): routing_lib/core/broker_rows.py.
    _route(
        BROKER_LIVE,
        ("cluster_name", "broker_addr", "broker_name"),
        ("cluster_name", STRING),
        ("broker_addr", STRING),
        ("broker_name", STRING),
        ("last_update_timestamp", BIGINT),
        ("heartbeat_timeout_millis", BIGINT),
        ("ha_server_addr", STRING),
        ("data_version", _DATA_VERSION),
        doc="brokerLiveTable: one row per live (cluster, broker address, brokerName); readers show "
        "the latest registration per (cluster, broker address)",
    ),
    _route(
        FILTER_SERVER,
        ("cluster_name", "broker_addr", "broker_name"),
        ("cluster_name", STRING),
        ("broker_addr", STRING),
        ("broker_name", STRING),
        ("filter_server_list", ArrayOf(STRING)),
        doc="filterServerTable: one row per (cluster, broker address, brokerName) with filter "
        "servers; readers show one per (cluster, broker address)",
    ),
    _route(
        KV_CONFIG,
        ("namespace", "key"),
        ("namespace", STRING),
        ("key", STRING),
        ("value", STRING),
        # older warehouses had no KV config
        optional=True,
        # A namespace is a row with key NULL (value NULL) as long as it exists, so an emptied
        # namespace stays visible (contract §4).
        doc="KVConfigManager's table: one row per (namespace, key), a namespace row key NULL",
    ),
)

SIDE_SPECS = (
    TableSpec(
        DEAD_LETTER,
        Family.SIDE,
        _columns(
            ("raw", Scalar.BINARY),
            ("raw_text", STRING),
            ("source", STRING),
            ("position", BIGINT),
            ("reason", STRING),
            ("seen_at_ms", BIGINT),
            ("batch_id", BIGINT),
        ),
        WriteMode.APPEND,
        RowKind.DEAD,
        frozenset({Reader.CONSOLE}),
        doc="records the job could not use, with the reason",
    ),
    TableSpec(
        LATE_EVENT,
        Family.SIDE,
        _columns(
            ("event_time", BIGINT),
            ("broker_name", STRING),
            ("event_type", STRING),
            ("source", STRING),
            ("position", BIGINT),
            ("payload", STRING),
            ("published_watermark", BIGINT),
            ("seen_at_ms", BIGINT),
            ("batch_id", BIGINT),
        ),
        WriteMode.APPEND,
        RowKind.LATE,
        frozenset({Reader.CONSOLE}),
        doc="events older than the published watermark",
    ),
    TableSpec(
        PROGRESS,
        Family.PROGRESS,
        _columns(
            *(
                (name, BIGINT)
                for name in (
                    "batch_id",
                    "watermark",
                    "input_rows",
                    "accepted",
                    "applied",
                    "late",
                    "dead_lettered",
                    "expired",
                    "changes",
                    "committed_at_ms",
                )
            )
        ),
        WriteMode.APPEND,
        None,  # committed by the writer last, after the batch's other tables
        frozenset({Reader.DUMP, Reader.LOOKUP, Reader.CONSOLE, Reader.PLOT}),
        doc="one row per published batch: the watermark its tables show, and its counts",
    ),
)

# event_date is 'YYYY-MM-DD' (UTC) of valid_from / event_time.
_EVENT_DATE = ("event_date",)


def _start_end(end: str) -> tuple[tuple[str, ColumnType], ...]:
    return (
        ("start_event", STRING),
        ("start_broker_addr", STRING),
        (end, STRING),
        ("end_event", STRING),
        ("end_broker_addr", STRING),
        ("event_date", STRING),
    )


def _interval(
    name: str,
    keys: tuple[str, ...],
    end: str,
    *columns: tuple[str, ColumnType],
    doc: str,
    derived_from: tuple[str, ...] = (),
) -> TableSpec:
    return TableSpec(
        name,
        Family.HISTORY,
        _columns(*columns, *_start_end(end)),
        WriteMode.MERGE,
        RowKind.HISTORY,
        _HISTORY_READERS,
        keys=keys,
        identity=(*keys, "valid_from"),
        close_columns=("valid_to", end, "end_event", "end_broker_addr"),
        partition_by=_EVENT_DATE,
        doc=doc,
        derived_from=derived_from,
    )


HISTORY_SPECS = (
    _interval(
        TOPIC_ROUTE_HISTORY,
        ("topic", "broker_name"),
        "ended_by",
        ("topic", STRING),
        ("broker_name", STRING),
        ("valid_from", BIGINT),
        ("valid_to", BIGINT),
        ("read_queue_nums", INT),
        ("write_queue_nums", INT),
        ("perm", INT),
        ("topic_sys_flag", INT),
        ("started_by", STRING),
        doc="one row per version of topicQueueTable[topic][brokerName]; derived when read from "
        "topic_base_changes and topic_overlay_changes",
        derived_from=("topic_base_changes", "topic_overlay_changes"),
    ),
    _interval(
        BROKER_MEMBERSHIP_HISTORY,
        ("cluster", "broker_name", "broker_id", "broker_addr"),
        "end_reason",
        ("cluster", STRING),
        ("broker_name", STRING),
        ("broker_id", BIGINT),
        ("broker_addr", STRING),
        ("valid_from", BIGINT),
        ("valid_to", BIGINT),
        ("start_reason", STRING),
        doc="one row per interval in which broker_addr held broker_id in brokerAddrTable",
    ),
    _interval(
        CLUSTER_MEMBERSHIP_HISTORY,
        ("cluster_name", "broker_name"),
        "end_reason",
        ("cluster_name", STRING),
        ("broker_name", STRING),
        ("valid_from", BIGINT),
        ("valid_to", BIGINT),
        ("start_reason", STRING),
        doc="one row per interval in which clusterAddrTable[cluster] listed broker_name",
    ),
    TableSpec(
        BROKER_LIVENESS_EVENTS,
        Family.HISTORY,
        _columns(
            ("broker_name", STRING),
            ("cluster_name", STRING),
            ("broker_addr", STRING),
            ("event_time", BIGINT),
            ("seq", INT),
            ("event_type", STRING),
            ("broker_id", BIGINT),
            ("last_update_timestamp", BIGINT),
            ("heartbeat_timeout_millis", BIGINT),
            ("deadline", BIGINT),
            ("event_date", STRING),
        ),
        WriteMode.MERGE,
        RowKind.HISTORY,
        _HISTORY_READERS,
        identity=("broker_name", "cluster_name", "broker_addr", "event_time", "seq"),
        partition_by=_EVENT_DATE,
        doc=(
            "REGISTERED / UNREGISTERED / EXPIRED / REJECTED / CHANNEL_CLOSED of a (cluster, "
            "broker address)"
        ),
    ),
    TableSpec(
        ADMIN_EVENTS,
        Family.HISTORY,
        _columns(
            ("event_time", BIGINT),
            ("event_type", STRING),
            ("broker_name", STRING),
            ("topic", STRING),
            ("cluster_name", STRING),
            ("namespace", STRING),
            ("key", STRING),
            ("value", STRING),
            ("requested_by", STRING),
            ("source", STRING),
            ("position", BIGINT),
            ("event_date", STRING),
        ),
        WriteMode.MERGE,
        RowKind.HISTORY,
        _HISTORY_READERS | {Reader.JOB},  # the job merges logged DELETE_TOPICs from it
        identity=("source", "position"),
        partition_by=_EVENT_DATE,
        doc="administrative events as they arrived: the audit trail and the DELETE_TOPIC log",
    ),
)

# ---- issue 36: group-level route truth ----------------------------------------------------------
# topicQueueTable is base + overlay per group (core/overlay.py): the stored truth is a group's
# configured topic table (`topic_base`, one partition per group, written only when its topics
# change) and one overlay row per group (`topic_overlay`: a fault changes this row only); the
# history stores their changes (one row per fault, one per changed topic), from which
# topic_route_history is derived (core/group_facts.py).

_QUEUE_COLUMNS = (
    ("read_queue_nums", INT),
    ("write_queue_nums", INT),
    ("perm", INT),
    ("topic_sys_flag", INT),
)
_OVERLAY_COLUMNS = (
    ("present", BOOLEAN),  # are the group's topics in topicQueueTable
    ("perm_op", STRING),  # PermOp name: ID, WIPE, RW, R
    ("covered", ArrayOf(STRING)),  # NULL: all of the base; else the topics covered (sorted)
)
_CAUSE_COLUMNS = (
    ("cause", STRING),  # the transition's kind (REGISTER, EXPIRED, WIPE_WRITE_PERM, ...)
    ("cause_broker_addr", STRING),  # the broker address it names, if any
)

GROUP_ROUTE_SPECS = (
    TableSpec(
        TOPIC_BASE,
        Family.ROUTE,
        _columns(("topic", STRING), ("broker_name", STRING), *_QUEUE_COLUMNS),
        WriteMode.MERGE,
        RowKind.CHANGE,
        # the job fans DELETE_TOPIC out to the groups holding the topic in their base (present
        # or not), and its writer derives topic_queue_table from it; the lookup serves from it
        frozenset({Reader.JOB, Reader.LOOKUP}),
        keys=("topic", "broker_name"),
        partition_by=("broker_name",),
        doc="each broker group's configured topic table (its base), kept while it is absent",
    ),
    TableSpec(
        TOPIC_OVERLAY,
        Family.ROUTE,
        _columns(("broker_name", STRING), *_OVERLAY_COLUMNS),
        WriteMode.MERGE,
        RowKind.CHANGE,
        # the writer derives topic_queue_table from it; the lookup applies it at read time
        frozenset({Reader.JOB, Reader.LOOKUP}),
        keys=("broker_name",),
        doc="one row per broker group with a base: present, perm_op, covered",
    ),
)

GROUP_HISTORY_SPECS = (
    TableSpec(
        TOPIC_BASE_CHANGES,
        Family.HISTORY,
        _columns(
            ("broker_name", STRING),
            ("topic", STRING),
            ("event_time", BIGINT),
            ("seq", INT),  # the transition's rank among the group's at event_time
            ("in_base", BOOLEAN),  # false: the topic left the base (queue columns NULL)
            *_QUEUE_COLUMNS,
            *_CAUSE_COLUMNS,
            ("event_date", STRING),
        ),
        WriteMode.MERGE,
        RowKind.HISTORY,
        _HISTORY_READERS,
        identity=("broker_name", "topic", "event_time", "seq"),
        partition_by=("event_date",),
        doc="one row per change of a group's base row (topic_route_history derives from these)",
    ),
    TableSpec(
        TOPIC_OVERLAY_CHANGES,
        Family.HISTORY,
        _columns(
            ("broker_name", STRING),
            ("event_time", BIGINT),
            ("seq", INT),
            *_OVERLAY_COLUMNS,
            *_CAUSE_COLUMNS,
            ("event_date", STRING),
        ),
        WriteMode.MERGE,
        RowKind.HISTORY,
        _HISTORY_READERS,
        identity=("broker_name", "event_time", "seq"),
        partition_by=("event_date",),
        doc="one row per change of a group's overlay: one per fault of the whole group",
    ),
)

# Every table, in the order the job creates them and housekeeping visits them.
CATALOG: tuple[TableSpec, ...] = (
    *ROUTE_SPECS,
    *GROUP_ROUTE_SPECS,
    *SIDE_SPECS,
    *HISTORY_SPECS,
    *GROUP_HISTORY_SPECS,
)
# The tables a warehouse holds (the job creates, writes and housekeeping compacts).
STORED: tuple[TableSpec, ...] = tuple(s for s in CATALOG if s.stored)
STORED_NAMES: tuple[str, ...] = tuple(s.name for s in STORED)
TABLES: dict[str, TableSpec] = {spec.name: spec for spec in CATALOG}
TABLE_NAMES: tuple[str, ...] = tuple(TABLES)


def spec(name: str) -> TableSpec:
    return TABLES[name]


def names(specs: Iterable[TableSpec]) -> tuple[str, ...]:
    return tuple(s.name for s in specs)


def of_family(family: Family) -> tuple[TableSpec, ...]:
    return tuple(s for s in CATALOG if s.family is family)


def read_by(reader: Reader) -> tuple[str, ...]:
    """The tables `reader` reads, in catalog order."""
    return tuple(s.name for s in CATALOG if reader in s.readers)
