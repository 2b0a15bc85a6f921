"""Topic name search that stays fast at millions of names: built once per snapshot.

Names are kept in case-folded order; a prefix is a binary search, a substring one pass of
str.find over all names joined by newlines (C speed: tens of ms over 3 M names), stopped
as soon as the page's worth of answers is found.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate

from routing_lib.console import timing

_SEP = "\n"  # cannot occur in a name the page searches for: queries are stripped of it


@dataclass(frozen=True)
class SearchResult:
    names: list[str]  # prefix matches first (in order), then other substring matches
    prefix_count: int  # every name starting with the query (exact)
    more: bool  # names beyond `names` match too


class TopicNames:
    def __init__(self, names: Iterable[str]) -> None:
        # Sorted by name, then (stable) by folded name: ties keep name order. Two flat sorts
        # cost a third of one sort of (folded, name) tuples.
        self.names = sorted(names)
        self.names.sort(key=str.casefold)
        self.folded = [name.casefold() for name in self.names]
        self._blob = _SEP + _SEP.join(self.folded) + _SEP
        # where each name starts in the blob: after the separator, one past the previous end
        self._starts = list(accumulate((len(key) + 1 for key in self.folded[:-1]), initial=1))

    def __len__(self) -> int:
        return len(self.names)

    def search(self, query: str, limit: int = 100) -> SearchResult:
        key = query.replace(_SEP, "").casefold()
        lo = bisect_left(self.folded, key)
        hi = bisect_right(self.folded, key + "\U0010ffff") if key else len(self.folded)
        found = self.names[lo : min(hi, lo + limit + 1)]  # one more: are there more?
        if key and len(found) <= limit:
            found += self._containing(key, limit + 1 - len(found), exclude=range(lo, hi))
        return SearchResult(found[:limit], hi - lo, len(found) > limit)

    def _containing(self, key: str, wanted: int, exclude: range) -> list[str]:
        """Up to `wanted` names containing `key` (not at their start), in order."""
        out: list[str] = []
        position = self._blob.find(key)
        while position >= 0 and len(out) < wanted:
            index = bisect_right(self._starts, position) - 1
            if index not in exclude and position > self._starts[index]:
                out.append(self.names[index])
            # go on after this name: one name counts once
            position = self._blob.find(key, self._starts[index] + len(self.folded[index]) + 1)
        return out


class NamesMemo:
    """The last name index built, reused while the topic set stays the same: most batches
    of a running job only move heartbeats, and a 3 M-name index takes seconds to build."""

    def __init__(self) -> None:
        self._topics: tuple[str, ...] | None = None
        self._names: TopicNames | None = None
        self._lock = threading.Lock()

    def get(self, topics: tuple[str, ...]) -> TopicNames:
        with self._lock:
            if self._names is None or self._topics != topics:  # equal when shared: cheap
                with timing.part("names"):
                    self._topics, self._names = topics, TopicNames(topics)
            return self._names
