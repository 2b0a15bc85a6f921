"""One brokerLiveTable / filterServerTable entry per (cluster, address), from the tables' rows.

RocketMQ's RouteInfoManager keeps one BrokerLiveInfo and one filter-server list per
(clusterName, brokerAddr): a registration of the same address under another brokerName (a
broker renamed and restarted in place) replaces the entry. routelake's state is per brokerName
group, so each group keeps the entries of the addresses it registered, and the published
tables hold one row per (cluster, address, brokerName): two groups never write one key. The
readers (the dump, the lookup, the console) show one entry per (cluster, address), the one
Java's map would hold as far as the rows can tell:

- brokerLiveTable: the row of the group that registered or sent a heartbeat last (the greatest
  `last_update_timestamp`; on a tie, the greater brokerName);
- filterServerTable: the filter servers of the group ranked the same way among the groups that
  have some at that address (a group with no live row there ranks below every live one).

Each group still expires its own rows, at its own deadline (docs/architecture.md, "Known
limits", says how that differs from Java).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from routing_lib.core.tables import Row

AddressKey = tuple[str, str]  # (clusterName, brokerAddr): RocketMQ's BrokerAddrInfo
NOT_LIVE = -1  # the rank of a group that has no live row at the address


def address_of(row: Row) -> AddressKey:
    return (row["cluster_name"], row["broker_addr"])


def _live_rank(row: Row) -> tuple[int, str]:
    return (int(row["last_update_timestamp"]), row.get("broker_name") or "")


def _best_per_address(rows: Iterable[Row], rank: Callable[[Row], tuple[int, str]]) -> list[Row]:
    """The highest-ranked row of each (cluster, address), in first-seen order of addresses."""
    best: dict[AddressKey, Row] = {}
    for row in rows:
        key = address_of(row)
        held = best.get(key)
        if held is None or rank(row) > rank(held):
            best[key] = row
    return list(best.values())


def latest_live(rows: Iterable[Row]) -> list[Row]:
    """One broker_live_table row per (cluster, address): the latest registration."""
    return _best_per_address(rows, _live_rank)


def shared_addresses(rows: Iterable[Row]) -> bool:
    """True when some (cluster, address) has rows of more than one brokerName."""
    seen: set[AddressKey] = set()
    for row in rows:
        key = address_of(row)
        if key in seen:
            return True
        seen.add(key)
    return False


def latest_filters(filter_rows: Iterable[Row], live_rows: Iterable[Row]) -> list[Row]:
    """One filter_server_table row per (cluster, address), ranked by the live rows (all of
    them, not only the latest per address); the live rows are read only when an address has
    filter rows of two groups."""
    rows = list(filter_rows)
    if not shared_addresses(rows):
        return rows
    updated = {
        (*address_of(r), r.get("broker_name")): int(r["last_update_timestamp"]) for r in live_rows
    }

    def rank(row: Row) -> tuple[int, str]:
        name = row.get("broker_name")
        return (updated.get((*address_of(row), name), NOT_LIVE), name or "")

    return _best_per_address(rows, rank)
