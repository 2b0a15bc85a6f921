"""Shared test helpers: golden fixtures, running a backfill, reading the result."""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from routelake_dev.simulator import generate_history, with_admin_events
from routing_lib.core.dump import project
from routing_lib.core.replay import default_watermark, replay_dump
from schemas import parse_event

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FIXTURES = sorted(p.name for p in GOLDEN.iterdir() if (p / "events.jsonl").exists())
DELAY_MS = 10_000


def seeds(values: int | Sequence[int]) -> Sequence[int]:
    """The seeds of a seeded property test (an int n means range(n)): all of them, or the first
    $ROUTELAKE_TEST_SEEDS when that is set lower (scripts/test.sh --quick sets a few; the full
    suite runs all). List a test's variants first, so that a few seeds still cover each."""
    every = range(values) if isinstance(values, int) else values
    limit = os.environ.get("ROUTELAKE_TEST_SEEDS", "")
    return every[: max(1, int(limit))] if limit else every


def fixture_lines(name: str) -> list[str]:
    return (GOLDEN / name / "events.jsonl").read_text().splitlines()


def expected_dump(name: str) -> dict:
    return project(json.loads((GOLDEN / name / "expected.json").read_text()))


def reference_dump(lines: list[str], until: int | None = None, delay_ms: int = DELAY_MS) -> dict:
    """State(until) by the plain sequential replay (default: the final watermark of a job whose
    watermark delay is `delay_ms`)."""
    events = [parse_event(line) for line in lines]
    if until is None:
        until = default_watermark(events, delay_ms)
    return project(replay_dump(events, until))


def split_lines(lines: list[str], parts: int, rng) -> list[list[str]]:
    """Cut lines into `parts` consecutive chunks at random places (arrival order kept)."""
    cuts = sorted(rng.sample(range(1, len(lines)), min(parts, len(lines)) - 1))
    return [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]


def write_files(folder: Path, chunks: list[list[str]], prefix: str = "part") -> list[Path]:
    """One file per chunk, modification times in chunk order (file sources pick files in
    modification-time order, and files written within one second tie)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, chunk in enumerate(chunks):
        path = folder / f"{prefix}-{i:04d}.jsonl"
        path.write_text("".join(line + "\n" for line in chunk))
        paths.append(path)
    set_mtimes(paths, range(len(paths)))
    return paths


def set_mtimes(paths: list[Path], order) -> None:
    """Give paths[order[0]] the oldest modification time, and so on."""
    for rank, index in enumerate(order):
        os.utime(paths[index], (1_700_000_000 + rank, 1_700_000_000 + rank))


def random_history(seed: int, rng: random.Random, collectors: int = 0) -> list[dict]:
    """A seeded random fleet history (3-7 groups, faults, role switches, disorder < delay);
    its sizes are drawn from `rng`, which the caller goes on using. `collectors` (1 or 2):
    as that many collectors publish it, with connections and their closes."""
    return generate_history(
        seed,
        brokers=rng.randint(3, 7),
        topics=rng.randint(2, 6),
        duration_ms=rng.randint(10, 25) * 60_000,
        period_ms=30_000,
        start_ms=1_764_000_000_000,
        disorder_ms=rng.randint(0, 6000),
        fault_interval_ms=120_000,
        collectors=collectors,
    )


def admin_history(seed: int) -> list[str]:
    """random_history with operators' events interleaved, as JSON lines."""
    rng = random.Random(seed)
    history = random_history(seed, rng)
    return [json.dumps(e) for e in with_admin_events(history, seed, every=rng.randint(5, 20))]


def _chunks(record: dict[str, Any], size: int, rng: random.Random) -> list[dict[str, Any]]:
    """A registration as RocketMQ 5.1.4+ splits it: chunks of `size` topics, each with the
    next dataVersion counter, a few ms apart."""
    names = list(record["topicConfigTable"])
    out = []
    for i, start in enumerate(range(0, len(names), size)):
        chunk = copy.deepcopy(record)
        chunk["topicConfigTable"] = {n: record["topicConfigTable"][n] for n in names[start:][:size]}
        chunk["dataVersion"]["counter"] = record["dataVersion"]["counter"] * 100 + i
        chunk["eventTime"] = record["eventTime"] + i * rng.randint(0, 3)
        out.append(chunk)
    return out


def registration_modes(history: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """`history` with some registrations split, re-sent, or changed under their dataVersion."""
    out: list[dict[str, Any]] = []
    split_brokers = {e["brokerName"] for e in history if rng.random() < 0.5}
    for record in history:
        if record["eventType"] != "REGISTER":
            out.append(record)
            continue
        roll = rng.random()
        if record["brokerName"] in split_brokers and len(record["topicConfigTable"]) > 1:
            out += _chunks(record, rng.randint(1, 3), rng)
        elif roll < 0.15 and record["topicConfigTable"]:  # changed, same dataVersion
            changed = copy.deepcopy(record)
            name = rng.choice(list(changed["topicConfigTable"]))
            changed["topicConfigTable"][name]["perm"] ^= 2
            out.append(changed)
        elif roll < 0.3:  # re-sent unchanged, as forceRegister=true does
            again = copy.deepcopy(record)
            again["eventTime"] += rng.randint(1, 50)
            out += [record, again]
        else:
            out.append(record)
    return sorted(out, key=lambda r: r["eventTime"]) if rng.random() < 0.2 else out


def register_record(
    event_time: int, cluster: str, host: str, name: str, topic: str
) -> dict[str, object]:
    """A minimal master REGISTER of one writable topic, as a JSON-ready record."""
    return {
        "eventType": "REGISTER",
        "eventTime": event_time,
        "clusterName": cluster,
        "brokerAddr": f"{host}:10911",
        "brokerName": name,
        "brokerId": 0,
        "haServerAddr": f"{host}:10912",
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": 1},
        "topicConfigTable": {topic: {"topicName": topic, "perm": 6}},
    }
