"""Encoding and archives: events as compact JSON lines, `.jsonl.gz` archive files by
event-time window, and reading such files back line by line."""

from __future__ import annotations

import gzip
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from routelake_dev.simulator.generation import Event

DEFAULT_ARCHIVE_MINUTES = 10
_JSON_SEPARATORS = (",", ":")


class EventEncoder:
    """Compact JSON bytes of an event, identical to json.dumps(event, separators=(",", ":")).

    A group's topicConfigTable object is shared by its REGISTER events until it changes, so
    its JSON is cached by identity (bounded by total size, least recently used out).

    The bound must hold the fleet's tables: a fleet registers every group once a period, in
    turn, and an LRU cache smaller than that cycle evicts each table just before its next use
    and hits nothing. At 300 x 10 000 (~1 MB of JSON a table) 256 MiB did exactly that: every
    registration was encoded again, ~7 of the fleet producer's ~12 CPU-s per 60 s
    (bench.fleet_producer_bench). 1 GiB holds ~900 such tables; the cache never grows past
    the tables a run sends.
    """

    def __init__(self, cache_bytes: int = 1024 * 1024 * 1024) -> None:
        self._cache: OrderedDict[int, tuple[object, str]] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._size = 0
        self.tables_encoded = 0  # cache misses: tables turned into JSON

    def _table_json(self, table: object) -> str:
        key = id(table)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is table:
            self._cache.move_to_end(key)
            return hit[1]
        text = json.dumps(table, separators=_JSON_SEPARATORS)
        self.tables_encoded += 1
        if hit is not None:
            self._size -= len(self._cache.pop(key)[1])
        self._cache[key] = (table, text)
        self._size += len(text)
        while self._size > self._cache_bytes and len(self._cache) > 1:
            self._size -= len(self._cache.popitem(last=False)[1][1])
        return text

    def __call__(self, event: Event) -> bytes:
        parts = []
        for key, value in event.items():
            text = (
                self._table_json(value)
                if key == "topicConfigTable"
                else json.dumps(value, separators=_JSON_SEPARATORS)
            )
            parts.append(f"{json.dumps(key)}:{text}")
        return ("{" + ",".join(parts) + "}").encode()


def encode_event(event: Event) -> bytes:
    return json.dumps(event, separators=_JSON_SEPARATORS).encode()


# ---- delivery -------------------------------------------------------------------------------


class ArchiveWriter:
    """Writes lines into `events-<UTC window start>.jsonl.gz`, one file per `minutes` of event
    time; a file is closed once the arrival stream (disorder <= lag_ms) cannot reach it."""

    def __init__(
        self, directory: str | Path, minutes: int = DEFAULT_ARCHIVE_MINUTES, lag_ms: int = 0
    ) -> None:
        if minutes < 1:
            raise ValueError("archive window must be at least 1 minute")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.window_ms = minutes * 60_000
        self.lag_ms = lag_ms
        self.files: list[Path] = []
        self._open: dict[int, tuple[BinaryIO, gzip.GzipFile]] = {}
        self._closed: set[int] = set()
        self._max_time = 0

    def path_for(self, window_start: int) -> Path:
        stamp = datetime.fromtimestamp(window_start / 1000, UTC).strftime("%Y%m%dT%H%M%SZ")
        return self.directory / f"events-{stamp}.jsonl.gz"

    def write(self, event_time: int, line: bytes) -> None:
        window = event_time - event_time % self.window_ms
        if window not in self._open:
            path = self.path_for(window)
            raw = open(path, "ab" if window in self._closed else "wb")
            # mtime=0 and no file name: the same history gives byte-identical archives
            self._open[window] = (raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0))
            if path not in self.files:
                self.files.append(path)
        self._open[window][1].write(line + b"\n")
        self._max_time = max(self._max_time, event_time)
        for start in [w for w in self._open if w + self.window_ms <= self._max_time - self.lag_ms]:
            self._close(start)

    def _close(self, window: int) -> None:
        raw, zipped = self._open.pop(window)
        zipped.close()
        raw.close()
        self._closed.add(window)

    def close(self) -> None:
        for window in list(self._open):
            self._close(window)

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_file_lines(path: str | Path) -> Iterator[bytes]:
    """The lines of a .jsonl / .jsonl.gz file as bytes, without line terminators (a final
    newline does not start another line)."""
    path = Path(path)
    opener: Callable[..., Any] = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as handle:
        for line in handle:
            yield line.removesuffix(b"\n").removesuffix(b"\r")


def line_key(line: bytes) -> bytes | None:
    """The brokerName of a line that is a JSON object with a string brokerName, else None."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    name = obj.get("brokerName") if isinstance(obj, dict) else None
    return name.encode() if isinstance(name, str) and name else None
