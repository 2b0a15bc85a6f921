"""topic_base's change-feed rows as new base entries, vectorised (issue 36).

A base change of many topics (a group re-registering its table with every perm flipped, a
new group, a DELETE_TOPIC of many) gives the lookup thousands of change rows per batch. They
are turned into the changed topics' new entries with Arrow and numpy over all rows at once:

1. the row that decides each (topic, broker_name) is its last in commit order (a commit's
   removals before its inserts: an overwrite removes and adds the same key);
2. the topics' holders before come from the base index's arrays (`RouteTopics.holders`;
   the delta's topics from their entries);
3. the holders after are those less the keys the rows decided plus the decided inserts,
   sorted by (topic, group name): a topic changed unless its rows after equal its rows
   before. Only the changed topics' entries (flat tuples, as the delta stores them) are
   built in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from routing_lib.lookup.base_index import QUEUE_COLUMNS
from routing_lib.lookup.route_topics import Catalog, Holders, RouteTopics
from routing_lib.lookup.topic_store import Entry, queue_of

REMOVES = frozenset({"delete", "update_preimage"})  # applied before a commit's inserts
_COLUMNS = ("topic", "broker_name", *QUEUE_COLUMNS, "_change_type", "_commit_version")
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class _Rows:
    """Holder rows: (topic index, group index, queue index) arrays, and for decided change
    rows whether each removes its key."""

    topic: Ints
    group: Ints
    queue: Ints
    removes: npt.NDArray[np.bool_] | None = None


def _plain_strings(table: pa.Table) -> pa.Table:
    """The columns used here, string views (delta-rs' change feed) as plain strings: the
    compute kernels used have none for views."""
    table = table.select(list(_COLUMNS))
    fields = [f.with_type(pa.string()) if f.type == pa.string_view() else f for f in table.schema]
    return table.cast(pa.schema(fields))


def _is_remove(kinds: pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    flags: npt.NDArray[np.bool_] = pc.is_in(kinds, pa.array(sorted(REMOVES))).to_numpy()
    return flags


def _last_per_key(changes: pa.Table) -> tuple[Ints, pa.DictionaryArray]:
    """The rows that decide each (topic, broker_name): the last in commit order, and the
    topic column dictionary-encoded (its dictionary: the touched topics)."""
    rows = changes.num_rows
    versions = changes.column("_commit_version").to_numpy().astype(np.int64)
    order = np.lexsort((np.arange(rows), ~_is_remove(changes.column("_change_type")), versions))
    topic = changes.column("topic").combine_chunks().dictionary_encode()
    broker = changes.column("broker_name").combine_chunks().dictionary_encode()
    key = topic.indices.to_numpy().astype(np.int64) * max(1, len(broker.dictionary))
    key += broker.indices.to_numpy()
    _, first_of_reversed = np.unique(key[order][::-1], return_index=True)
    return order[rows - 1 - first_of_reversed], topic


def _decided(
    changes: pa.Table, topic_codes: pa.DictionaryArray, last: Ints, catalog: Catalog
) -> _Rows:
    """The deciding rows as holder rows (names and queue datas indexed by `catalog`)."""
    decided = changes.take(pa.array(last))
    brokers = decided.column("broker_name").combine_chunks().dictionary_encode()
    group = np.array([catalog.name(b) for b in brokers.dictionary.to_pylist()], np.int64)
    values = [decided.column(c).to_numpy(zero_copy_only=False) for c in QUEUE_COLUMNS]
    distinct, inverse = np.unique(np.stack(values, axis=1), axis=0, return_inverse=True)
    queue = np.array([catalog.queue(queue_of(*q)) for q in distinct.tolist()], np.int64)
    return _Rows(
        topic_codes.indices.to_numpy()[last].astype(np.int64),
        group[brokers.indices.to_numpy()],
        queue[inverse.reshape(-1)],
        _is_remove(decided.column("_change_type")),
    )


def _after(before: Holders, decided: _Rows, catalog: Catalog) -> _Rows:
    """The holder rows after the changes, sorted by (topic, group name) as entries are."""
    width = len(catalog.names)
    touched = np.isin(before.topic * width + before.group, decided.topic * width + decided.group)
    adds = ~decided.removes if decided.removes is not None else slice(None)
    topic = np.concatenate([before.topic[~touched], decided.topic[adds]])
    group = np.concatenate([before.group[~touched], decided.group[adds]])
    queue = np.concatenate([before.queue[~touched], decided.queue[adds]])
    rank = np.empty(width, np.int64)
    rank[sorted(range(width), key=catalog.names.__getitem__)] = np.arange(width)
    order = np.lexsort((rank[group], topic))
    return _Rows(topic[order], group[order], queue[order])


def _changed(before: Holders, after: _Rows, count: int) -> tuple[npt.NDArray[np.bool_], Ints]:
    """Per topic: do its rows after differ from its rows before; and its rows after."""
    n_before = before.per_topic(count)
    n_after = np.bincount(after.topic, minlength=count)
    changed = n_before != n_after
    old_rows, new_rows = ~changed[before.topic], ~changed[after.topic]  # aligned: same sizes
    differs = (before.group[old_rows] != after.group[new_rows]) | (
        before.queue[old_rows] != after.queue[new_rows]
    )
    changed[before.topic[old_rows][differs]] = True
    return changed, n_after


def _entries(
    names: list[str], picked: Ints, after: _Rows, sizes: Ints, catalog: Catalog
) -> dict[str, Entry | None]:
    """The picked topics' entries: flat (group, queue, ...) tuples cut from one list."""
    flat = np.empty(2 * len(after.topic), object)
    flat[0::2] = np.array(catalog.names, object)[after.group]
    queues = np.empty(len(catalog.queues), object)
    for i, queue in enumerate(catalog.queues):  # one by one: a tuple is not a sequence here
        queues[i] = queue
    flat[1::2] = queues[after.queue]
    objects = flat.tolist()
    ends = 2 * np.cumsum(sizes)
    starts = ends - 2 * sizes
    out: dict[str, Entry | None] = {}
    for k, first, end in zip(
        picked.tolist(), starts[picked].tolist(), ends[picked].tolist(), strict=True
    ):
        out[names[k]] = tuple(objects[first:end]) if end > first else None
    return out


def changed_entries(topics: RouteTopics, changes: pa.Table) -> tuple[dict[str, Entry | None], Ints]:
    """The new base entries of the topics topic_base's change-feed rows touch (`topics`:
    the entries before them; None: no holder left); topics whose entry came out unchanged
    are left out. And each entry's topic id in topics' base index (-1: none), in order."""
    if changes.num_rows == 0:
        return {}, np.zeros(0, np.int64)
    changes = _plain_strings(changes)
    last, topic_codes = _last_per_key(changes)
    names = topic_codes.dictionary.to_pylist()
    catalog = Catalog(topics.base)
    ids = topics.base.find_many(names)  # every topic's, for `changed`: in the delta or not
    before = topics.holders(names, catalog=catalog, ids=ids)
    after = _after(before, _decided(changes, topic_codes, last, catalog), catalog)
    changed, sizes = _changed(before, after, len(names))
    picked = np.flatnonzero(changed)
    return _entries(names, picked, after, sizes, catalog), ids[picked]
