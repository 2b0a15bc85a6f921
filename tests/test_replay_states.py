"""replay_dumps (one pass over a history for many instants) equals replay_dump at each."""

from __future__ import annotations

import json
import random

import pytest

from routing_lib.core.replay import replay_dump, replay_dumps
from schemas import parse_event
from tests.support.helpers import FIXTURES, fixture_lines, random_history


def _events(lines: list[str]) -> list:
    return [parse_event(line) for line in lines]


@pytest.mark.parametrize("name", [n for n in FIXTURES if not n.startswith("20_")])
def test_every_instant_of_a_golden_fixture(name):
    events = _events(fixture_lines(name))
    times = sorted({e.eventTime + d for e in events for d in (-1, 0, 1)})
    assert [d for _, d in replay_dumps(events, times)] == [replay_dump(events, t) for t in times]


def test_random_instants_of_random_histories_in_any_order():
    rng = random.Random(5)
    for seed in range(3):
        events = _events([json.dumps(e) for e in random_history(seed, rng)])
        start, end = min(e.eventTime for e in events), max(e.eventTime for e in events)
        times = [rng.randint(start - 1, end + 200_000) for _ in range(15)]
        got = dict(replay_dumps(events, times))
        assert sorted(got) == sorted(set(times))
        assert got == {t: replay_dump(events, t) for t in set(times)}


def test_no_instants_no_states():
    assert list(replay_dumps(_events(fixture_lines(FIXTURES[0])), [])) == []
