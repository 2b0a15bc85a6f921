"""Analyst recipes over the event-time history tables, each written twice: as Spark SQL text
(over ``delta.`{warehouse}/<table>` ``, with named parameter markers such as ``:at``; the
derived topic_route_history is the temp view ``topic_route_history`` that `spark_sql`
registers, spark/history_views.py) and as a pandas function over the tables loaded with
delta-rs. docs/history-recipes.md shows this
code verbatim (``python -m routing_lib.history_recipes --sync-doc FILE`` rewrites its recipe
blocks); tests/test_history_recipes.py checks that both versions agree with the pure core.

Times are epoch milliseconds of event time. A history row is in State(T) iff
``valid_from <= T and (valid_to IS NULL OR T < valid_to)``; rows are only final up to the
published watermark (route_progress).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from routing_lib import storage
from routing_lib.core.admin import ADMIN_EVENTS
from routing_lib.core.catalog import Scalar, spec
from routing_lib.core.group_routes import PERM_WRITE
from routing_lib.core.history import (
    BROKER_LIVENESS_EVENTS,
    BROKER_MEMBERSHIP_HISTORY,
    CLUSTER_MEMBERSHIP_HISTORY,
    EXPIRED,
    HISTORY_TABLES,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.tables import Row
from routing_lib.read.arrow_filters import Filter
from routing_lib.read.history import read_history_table

# A dict of history tables: DataFrames from load_frames, or row lists from load_history.
History = Mapping[str, pd.DataFrame | Sequence[Row]]

_NULLABLE_INTS = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype()}


# ---- loading ----------------------------------------------------------------------------------


def load_frames(
    warehouse: str | Path,
    tables: Sequence[str] = HISTORY_TABLES,
    filters: Mapping[str, list[Filter]] | None = None,
) -> dict[str, pd.DataFrame]:
    """History tables as DataFrames, read with delta-rs (no JVM). Integer columns stay
    integers (nullable Int64), so valid_to NULL is <NA>, not a float NaN. `filters`: delta-rs
    filters per table, e.g. {"broker_liveness_events": [("event_date", ">=", "2025-11-24")]}."""
    frames = {}
    for table in tables:  # topic_route_history: derived from its change tables (issue 36)
        arrow = read_history_table(warehouse, table, (filters or {}).get(table))
        frames[table] = arrow.to_pandas(types_mapper=_NULLABLE_INTS.get)
    return frames


def _frame(history: History, table: str) -> pd.DataFrame:
    """One table as a DataFrame with every column of its schema (also when empty)."""
    data = history[table]
    if isinstance(data, pd.DataFrame):
        return data
    columns = spec(table).columns
    frame = pd.DataFrame.from_records(list(data), columns=[c.name for c in columns])
    ints = {c.name: "Int64" for c in columns if c.type in (Scalar.BIGINT, Scalar.INT)}
    return frame.astype(ints)


def _valid_at(frame: pd.DataFrame, at: int) -> pd.Series:
    """Rows whose [valid_from, valid_to) interval contains `at`."""
    return (
        (frame["valid_from"] <= at) & (frame["valid_to"].isna() | (frame["valid_to"] > at))
    ).astype(bool)


def spark_sql(spark: Any, sql: str, warehouse: str | Path, **params: Any) -> Any:
    """Run one recipe's SQL with Spark: `{warehouse}` filled in, `:name` markers bound."""
    # Spark binds plain Python values only: unwrap numpy scalars (values read off pandas).
    args = {name: v.item() if isinstance(v, np.generic) else v for name, v in params.items()}
    location = storage.spark_uri(  # s3:// / s3a:// as Spark spells it (docs/object-storage.md)
        warehouse if storage.is_remote(warehouse) else Path(warehouse).resolve()
    )
    if TOPIC_ROUTE_HISTORY in sql:  # not stored: a view derived from its change tables
        from routing_lib.spark.history_views import register_history_views

        register_history_views(spark, warehouse)
    return spark.sql(sql.format(warehouse=location), args=args)


# ---- (a) routes of a topic at event time T -----------------------------------------------------

ROUTES_AT_SQL = """\
WITH route AS (
  SELECT broker_name, read_queue_nums, write_queue_nums, perm, topic_sys_flag, valid_from
  FROM topic_route_history
  WHERE topic = :topic AND valid_from <= :at AND (valid_to IS NULL OR :at < valid_to)
), member AS (
  SELECT broker_name, MAX(cluster) AS cluster,
         MAX(CASE WHEN broker_id = 0 THEN broker_addr END) AS master_addr
  FROM delta.`{warehouse}/broker_membership_history`
  WHERE valid_from <= :at AND (valid_to IS NULL OR :at < valid_to)
  GROUP BY broker_name
)
SELECT r.broker_name, m.cluster, m.master_addr, r.read_queue_nums, r.write_queue_nums,
       r.perm, r.topic_sys_flag, r.valid_from AS since
FROM route r LEFT JOIN member m ON m.broker_name = r.broker_name
ORDER BY r.broker_name
"""


def routes_at(history: History, topic: str, at: int) -> pd.DataFrame:
    """topicQueueTable[topic] at event time `at`: one row per broker group serving it, with
    its cluster and master address at `at` (None when the group has no broker id 0)."""
    routes = _frame(history, TOPIC_ROUTE_HISTORY)
    routes = routes[(routes["topic"] == topic) & _valid_at(routes, at)]
    members = _frame(history, BROKER_MEMBERSHIP_HISTORY)
    members = members[_valid_at(members, at)]
    groups = members.groupby("broker_name").agg(cluster=("cluster", "max")).reset_index()
    masters = members.loc[members["broker_id"] == 0, ["broker_name", "broker_addr"]]
    out = (
        routes.rename(columns={"valid_from": "since"})
        .merge(groups, on="broker_name", how="left")
        .merge(masters.rename(columns={"broker_addr": "master_addr"}), on="broker_name", how="left")
    )
    columns = [
        "broker_name",
        "cluster",
        "master_addr",
        "read_queue_nums",
        "write_queue_nums",
        "perm",
        "topic_sys_flag",
        "since",
    ]
    return out[columns].sort_values("broker_name").reset_index(drop=True)


# ---- (b) masterless intervals per broker group -------------------------------------------------

MASTERLESS_INTERVALS_SQL = """\
WITH member AS (
  SELECT broker_name, broker_id, valid_from, valid_to
  FROM delta.`{warehouse}/broker_membership_history`
), point AS (
  SELECT broker_name, valid_from AS t FROM member
  UNION
  SELECT broker_name, valid_to AS t FROM member WHERE valid_to IS NOT NULL
), segment AS (
  SELECT broker_name, t AS seg_from,
         LEAD(t) OVER (PARTITION BY broker_name ORDER BY t) AS seg_to
  FROM point
), segment_state AS (
  SELECT s.broker_name, s.seg_from, s.seg_to,
         COUNT(m.broker_id) > 0 AND COUNT_IF(m.broker_id = 0) = 0 AS masterless
  FROM segment s LEFT JOIN member m
    ON m.broker_name = s.broker_name AND m.valid_from <= s.seg_from
   AND (m.valid_to IS NULL OR s.seg_from < m.valid_to)
  GROUP BY s.broker_name, s.seg_from, s.seg_to
), island AS (
  SELECT *, SUM(CASE WHEN masterless THEN 0 ELSE 1 END)
              OVER (PARTITION BY broker_name ORDER BY seg_from) AS island
  FROM segment_state
)
SELECT broker_name, MIN(seg_from) AS masterless_from,
       CASE WHEN COUNT(seg_to) < COUNT(*) THEN NULL ELSE MAX(seg_to) END AS masterless_to
FROM island
WHERE masterless
GROUP BY broker_name, island
ORDER BY broker_name, masterless_from
"""


def masterless_intervals(history: History) -> pd.DataFrame:
    """[masterless_from, masterless_to) intervals in which a broker group was in
    brokerAddrTable (had at least one address) but no broker id 0; masterless_to <NA>: still
    masterless at the watermark. The state only changes where a membership interval starts or
    ends, so a running count of members and masters over those points is enough."""
    members = _frame(history, BROKER_MEMBERSHIP_HISTORY)
    is_master = (members["broker_id"] == 0).astype(int)
    starts = pd.DataFrame(
        {
            "broker_name": members["broker_name"],
            "t": members["valid_from"],
            "members": 1,
            "masters": is_master,
        }
    )
    ended = members["valid_to"].notna()
    ends = pd.DataFrame(
        {
            "broker_name": members.loc[ended, "broker_name"],
            "t": members.loc[ended, "valid_to"],
            "members": -1,
            "masters": -is_master[ended],
        }
    )
    counts = (
        pd.concat([starts, ends])
        .groupby(["broker_name", "t"])
        .sum()
        .groupby(level="broker_name")
        .cumsum()
    )
    rows = []
    for name, group in counts.groupby(level="broker_name"):
        start = None
        for (_, t), n in group.iterrows():
            masterless = n["members"] > 0 and n["masters"] == 0
            if masterless and start is None:
                start = t
            elif not masterless and start is not None:
                rows.append((name, start, t))
                start = None
        if start is not None:
            rows.append((name, start, None))
    out = pd.DataFrame(rows, columns=["broker_name", "masterless_from", "masterless_to"])
    return out.astype({"masterless_from": "Int64", "masterless_to": "Int64"})


# ---- (c) topics that lost write permission in [start, end) ------------------------------------

WRITE_PERM_LOST_SQL = """\
WITH version AS (
  SELECT topic, broker_name, valid_from, perm, started_by, start_broker_addr,
         LAG(perm) OVER (PARTITION BY topic, broker_name ORDER BY valid_from) AS previous_perm,
         LAG(valid_to) OVER (PARTITION BY topic, broker_name ORDER BY valid_from)
           AS previous_valid_to
  FROM topic_route_history
)
SELECT topic, broker_name, valid_from AS lost_at, previous_perm, perm, started_by,
       start_broker_addr, previous_valid_to
FROM version
WHERE valid_from >= :start AND valid_from < :end
  AND (previous_perm & 2) <> 0 AND (perm & 2) = 0
ORDER BY lost_at, topic, broker_name
"""


def write_perm_lost(history: History, start: int, end: int) -> pd.DataFrame:
    """Versions of topicQueueTable[topic][brokerName] starting in [start, end) without the
    write bit whose previous version (same topic and broker group) had it. started_by tells
    why (PERM_WIPED: an acting-master group lost its master; CONFIG_CHANGED: the master
    re-registered it read-only); previous_valid_to < lost_at means the route was absent in
    between."""
    versions = _frame(history, TOPIC_ROUTE_HISTORY).sort_values("valid_from", kind="stable")
    by_key = versions.groupby(["topic", "broker_name"], sort=False)
    versions = versions.assign(
        previous_perm=by_key["perm"].shift(), previous_valid_to=by_key["valid_to"].shift()
    )
    lost = versions[
        (versions["valid_from"] >= start)
        & (versions["valid_from"] < end)
        & ((versions["previous_perm"].fillna(0) & PERM_WRITE) != 0)
        & ((versions["perm"] & PERM_WRITE) == 0)
    ]
    out = lost.rename(columns={"valid_from": "lost_at"})[
        [
            "topic",
            "broker_name",
            "lost_at",
            "previous_perm",
            "perm",
            "started_by",
            "start_broker_addr",
            "previous_valid_to",
        ]
    ]
    return out.sort_values(["lost_at", "topic", "broker_name"]).reset_index(drop=True)


# ---- (d) brokers expiring more than N times a day ---------------------------------------------

FREQUENT_EXPIRIES_SQL = """\
SELECT cluster_name, broker_name, broker_addr, event_date AS day, COUNT(*) AS expiries
FROM delta.`{warehouse}/broker_liveness_events`
WHERE event_type = 'EXPIRED'
GROUP BY cluster_name, broker_name, broker_addr, event_date
HAVING COUNT(*) > :n
ORDER BY day, expiries DESC, cluster_name, broker_addr
"""


def frequent_expiries(history: History, n: int) -> pd.DataFrame:
    """Brokers (cluster, group, address) that expired more than `n` times in one UTC day.
    event_date is the UTC day of event_time (for EXPIRED: heartbeat deadline + 1 ms) and the
    table's partition column, so a day range filter prunes files."""
    events = _frame(history, BROKER_LIVENESS_EVENTS)
    expired = events[events["event_type"] == EXPIRED].rename(columns={"event_date": "day"})
    counts = (
        expired.groupby(["cluster_name", "broker_name", "broker_addr", "day"])
        .size()
        .rename("expiries")
        .reset_index()
    )
    out = counts[counts["expiries"] > n]
    out = out.sort_values(
        ["day", "expiries", "cluster_name", "broker_addr"], ascending=[True, False, True, True]
    )
    return out[["cluster_name", "broker_name", "broker_addr", "day", "expiries"]].reset_index(
        drop=True
    )


# ---- (e) cluster size over time ---------------------------------------------------------------

CLUSTER_SIZES_SQL = """\
WITH change AS (
  SELECT cluster_name, valid_from AS at, 1 AS delta
  FROM delta.`{warehouse}/cluster_membership_history`
  UNION ALL
  SELECT cluster_name, valid_to AS at, -1 AS delta
  FROM delta.`{warehouse}/cluster_membership_history`
  WHERE valid_to IS NOT NULL
), net AS (
  SELECT cluster_name, at, SUM(delta) AS delta FROM change GROUP BY cluster_name, at
)
SELECT cluster_name, at,
       SUM(delta) OVER (PARTITION BY cluster_name ORDER BY at) AS broker_groups
FROM net
WHERE delta <> 0
ORDER BY cluster_name, at
"""


def cluster_sizes(history: History) -> pd.DataFrame:
    """len(clusterAddrTable[cluster]) from each instant it changes: one row per cluster and
    change point `at`, valid until the cluster's next row (0: the cluster is gone)."""
    members = _frame(history, CLUSTER_MEMBERSHIP_HISTORY)
    ended = members[members["valid_to"].notna()]
    changes = pd.concat(
        [
            pd.DataFrame(
                {"cluster_name": members["cluster_name"], "at": members["valid_from"], "delta": 1}
            ),
            pd.DataFrame(
                {"cluster_name": ended["cluster_name"], "at": ended["valid_to"], "delta": -1}
            ),
        ]
    )
    net = changes.groupby(["cluster_name", "at"])["delta"].sum().reset_index()
    net["broker_groups"] = net.groupby("cluster_name")["delta"].cumsum()
    out = net[net["delta"] != 0][["cluster_name", "at", "broker_groups"]]
    return out.astype({"at": "Int64", "broker_groups": "Int64"}).reset_index(drop=True)


# ---- (f) who changed broker X's write permission, when ---------------------------------------

WRITE_PERM_CHANGES_SQL = """\
WITH change AS (
  SELECT event_time, event_type, broker_name, requested_by, source, position
  FROM delta.`{warehouse}/admin_events`
  WHERE broker_name = :broker AND event_type IN ('WIPE_WRITE_PERM', 'ADD_WRITE_PERM')
), touched AS (
  SELECT valid_from, start_event, topic
  FROM topic_route_history
  WHERE broker_name = :broker AND start_event IN ('WIPE_WRITE_PERM', 'ADD_WRITE_PERM')
)
SELECT c.event_time, c.event_type, c.broker_name, c.requested_by,
       COUNT(t.topic) AS topics_changed,
       array_join(sort_array(collect_list(t.topic)), ',') AS topics, c.source, c.position
FROM change c LEFT JOIN touched t
  ON t.valid_from = c.event_time AND t.start_event = c.event_type
GROUP BY c.event_time, c.event_type, c.broker_name, c.requested_by, c.source, c.position
ORDER BY c.event_time, c.source, c.position
"""

WRITE_PERM_EVENTS = ("WIPE_WRITE_PERM", "ADD_WRITE_PERM")


def write_perm_changes(history: History, broker: str) -> pd.DataFrame:
    """Every wipeWritePerm / addWritePerm of brokerName `broker` the job applied (admin_events:
    not late), by event time: who asked (requested_by, the client address the collector saw),
    where the event came from (source, position), and which topics' routes it changed (the
    topic_route_history versions it started). topics_changed 0: nothing to change (already
    wiped, or no such broker group at that time). Two requests of one kind for one group at
    the same millisecond would both list that instant's topics."""
    events = _frame(history, ADMIN_EVENTS)
    changes = events[
        (events["broker_name"] == broker) & events["event_type"].isin(WRITE_PERM_EVENTS)
    ]
    routes = _frame(history, TOPIC_ROUTE_HISTORY)
    touched = routes[
        (routes["broker_name"] == broker) & routes["start_event"].isin(WRITE_PERM_EVENTS)
    ]
    topics = {
        (int(at), kind): sorted(group)
        for (at, kind), group in touched.groupby(["valid_from", "start_event"])["topic"]
    }
    rows = []
    for e in changes.itertuples():
        names = topics.get((int(e.event_time), e.event_type), [])
        rows.append(
            (
                e.event_time,
                e.event_type,
                e.broker_name,
                e.requested_by,
                len(names),
                ",".join(names),
                e.source,
                e.position,
            )
        )
    columns = [
        "event_time",
        "event_type",
        "broker_name",
        "requested_by",
        "topics_changed",
        "topics",
        "source",
        "position",
    ]
    out = pd.DataFrame(rows, columns=columns).astype(
        {"event_time": "Int64", "topics_changed": "Int64", "position": "Int64"}
    )
    return out.sort_values(["event_time", "source", "position"]).reset_index(drop=True)


# ---- the doc's recipe blocks ------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    name: str
    sql_name: str
    sql: str
    function: Callable[..., pd.DataFrame]
    params: str  # the SQL's parameter markers


RECIPES = (
    Recipe("routes_at", "ROUTES_AT_SQL", ROUTES_AT_SQL, routes_at, ":topic, :at"),
    Recipe(
        "masterless_intervals",
        "MASTERLESS_INTERVALS_SQL",
        MASTERLESS_INTERVALS_SQL,
        masterless_intervals,
        "none",
    ),
    Recipe(
        "write_perm_lost",
        "WRITE_PERM_LOST_SQL",
        WRITE_PERM_LOST_SQL,
        write_perm_lost,
        ":start, :end",
    ),
    Recipe(
        "frequent_expiries", "FREQUENT_EXPIRIES_SQL", FREQUENT_EXPIRIES_SQL, frequent_expiries, ":n"
    ),
    Recipe("cluster_sizes", "CLUSTER_SIZES_SQL", CLUSTER_SIZES_SQL, cluster_sizes, "none"),
    Recipe(
        "write_perm_changes",
        "WRITE_PERM_CHANGES_SQL",
        WRITE_PERM_CHANGES_SQL,
        write_perm_changes,
        ":broker",
    ),
)
HELPERS = (load_frames, _frame, _valid_at, spark_sql)

_BLOCK = re.compile(r"(<!-- recipe:(\w+) -->\n)(.*?)(<!-- /recipe -->)", re.DOTALL)


def recipe_block(name: str) -> str:
    """Markdown for one doc block: a recipe's SQL and pandas code, or the shared helpers."""
    if name == "helpers":
        code = "\n\n".join(inspect.getsource(f) for f in HELPERS)
        return f"```python\n{code}```\n"
    recipe = next(r for r in RECIPES if r.name == name)
    return (
        f"Spark SQL (`{recipe.sql_name}`, parameters: {recipe.params}):\n\n"
        f"```sql\n{recipe.sql}```\n\n"
        f"delta-rs + pandas (`{recipe.name}`):\n\n"
        f"```python\n{inspect.getsource(recipe.function)}```\n"
    )


def sync_doc(text: str) -> str:
    """`text` with every `<!-- recipe:NAME -->` ... `<!-- /recipe -->` block regenerated."""
    return _BLOCK.sub(lambda m: m.group(1) + recipe_block(m.group(2)) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sync-doc",
        metavar="FILE",
        required=True,
        help="rewrite the recipe blocks of this Markdown file",
    )
    args = parser.parse_args(argv)
    path = Path(args.sync_doc)
    text = path.read_text()
    synced = sync_doc(text)
    if synced != text:
        path.write_text(synced)
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
