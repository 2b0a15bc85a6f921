"""history._topic_route_changes against the set-of-pairs definition, on tables with the same
topics in the same order (its pairwise fast path) and on tables that differ in topics or
order (the set path), and group_facts.base_changes' memo of the last pair."""

from __future__ import annotations

import random

from routing_lib.core.group_facts import base_changes
from routing_lib.core.history import _topic_route_changes
from routing_lib.core.topic_table import QueueData, TopicTable


def _reference(old: TopicTable, new: TopicTable) -> tuple[list[str], list[str]]:
    old_items, new_items = set(old.rows().items()), set(new.rows().items())
    return sorted(t for t, _ in old_items - new_items), sorted(t for t, _ in new_items - old_items)


def _row(rng: random.Random) -> QueueData:
    return QueueData(rng.choice([4, 8]), rng.choice([4, 8]), rng.choice([2, 4, 6]), 0)


def test_same_topics_pairwise_and_changed_topics_by_sets() -> None:
    rng = random.Random(7)
    for _ in range(300):
        names = [f"T{i}" for i in rng.sample(range(60), rng.randint(1, 40))]
        old = TopicTable({n: _row(rng) for n in names})
        shape = rng.choice(["rows", "added", "dropped", "reordered"])
        rows = dict(old.rows())
        for n in rng.sample(names, rng.randint(0, len(names))):
            rows[n] = _row(rng)
        if shape == "added":
            rows[f"T{rng.randint(60, 90)}"] = _row(rng)
        elif shape == "dropped":
            rows.pop(rng.choice(names))
        elif shape == "reordered":
            keys = list(rows)
            rng.shuffle(keys)
            rows = {k: rows[k] for k in keys}
        new = TopicTable(rows)
        assert _topic_route_changes(old, new) == _reference(old, new)


def test_base_changes_memo_is_by_identity() -> None:
    old = TopicTable({"a": QueueData(8, 8, 6, 0), "b": QueueData(8, 8, 6, 0)})
    new = old.updated({"b": QueueData(8, 8, 4, 0)})
    other = old.updated({"a": QueueData(4, 4, 6, 0)})
    first = base_changes(old, new)
    assert first == ([], ["b"])
    assert base_changes(old, new) is first  # the memo's answer, not computed again
    assert base_changes(old, other) == ([], ["a"])  # another pair: computed again
    assert base_changes(new, old.without(["b"])) == (["b"], [])  # a topic gone
    equal_copy = TopicTable(dict(new.rows()))  # equal, not the same object
    again = base_changes(old, equal_copy)
    assert again == ([], ["b"]) and again is not first  # identity decides, not equality
