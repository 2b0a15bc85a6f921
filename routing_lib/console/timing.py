"""Where one console answer's time went, sent back as its `Server-Timing` header.

An answer is built in one worker thread (app.py), so the parts it passes through record into
that thread's tally: delta-rs reads (`delta`: table versions read, and `pins`: the Delta logs
read to pin each table to the served batch), and the per-snapshot builds (`fleet`, `names`,
`state`: State(T)), each counted only when this answer built it, not when it found it in
the snapshot's cache. Browsers show the header in their network panel and expose it to
scripts (PerformanceResourceTiming.serverTiming); the console bench reads it there. It costs
a few clock reads per answer and says nothing a page does not already show.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_local = threading.local()


class Tally:
    """Seconds and counts per part of one answer."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.parts: dict[str, tuple[int, float]] = {}

    def add(self, part: str, seconds: float) -> None:
        count, total = self.parts.get(part, (0, 0.0))
        self.parts[part] = (count + 1, total + seconds)

    def header(self) -> str:
        """`total` (the whole build), then each part: its ms and how many times it ran.
        `cache;desc=hit`: the answer read no table and built nothing."""
        total = (time.perf_counter() - self.started) * 1000
        items = [f"total;dur={total:.1f}"]
        items += [f'{p};dur={s * 1000:.1f};desc="{n}"' for p, (n, s) in sorted(self.parts.items())]
        if not self.parts:
            items.append('cache;desc="hit"')
        return ", ".join(items)


@contextmanager
def tally() -> Iterator[Tally]:
    """Record the parts this thread runs through until the block ends."""
    _local.tally = current = Tally()
    try:
        yield current
    finally:
        _local.tally = None


@contextmanager
def part(name: str) -> Iterator[None]:
    """Time a block into the current answer's tally (nothing when there is none)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        current: Tally | None = getattr(_local, "tally", None)
        if current is not None:
            current.add(name, time.perf_counter() - started)
