"""Shared test helpers: golden fixtures, running a backfill, reading the result."""

from __future__ import annotations

import json
from pathlib import Path

from routing_lib.core.dump import project
from routing_lib.core.replay import default_watermark, replay_dump
from schemas import parse_event

GOLDEN = Path(__file__).parent / "golden"
FIXTURES = sorted(p.name for p in GOLDEN.iterdir() if (p / "events.jsonl").exists())
DELAY_MS = 10_000


def fixture_lines(name: str) -> list[str]:
    return (GOLDEN / name / "events.jsonl").read_text().splitlines()


def expected_dump(name: str) -> dict:
    return project(json.loads((GOLDEN / name / "expected.json").read_text()))


def reference_dump(lines: list[str], until: int | None = None) -> dict:
    """State(until) by the plain sequential replay (default: the final watermark)."""
    events = [parse_event(line) for line in lines]
    if until is None:
        until = default_watermark(events, DELAY_MS)
    return project(replay_dump(events, until))


def write_files(folder: Path, chunks: list[list[str]], prefix: str = "part") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, chunk in enumerate(chunks):
        path = folder / f"{prefix}-{i:04d}.jsonl"
        path.write_text("".join(line + "\n" for line in chunk))
        paths.append(path)
    return paths
