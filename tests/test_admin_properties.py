"""Property: random fleet histories with operators' events, cut into random micro-batches
through the streaming model (admin log, fan-out, wake-ups), equal the sequential replay."""

from __future__ import annotations

import random

import pytest

from routing_lib.core.dump import project
from routing_lib.core.replay import default_watermark, replay_dump
from schemas import parse_event
from tests.support.helpers import DELAY_MS, admin_history, seeds
from tests.support.stream_model import run_model_in_batches


@pytest.mark.parametrize("seed", seeds(30))
def test_random_admin_history_in_random_batches_equals_replay(seed):
    events = [parse_event(line) for line in admin_history(seed)]
    assert any(e.eventType == "DELETE_TOPIC" for e in events)
    final = default_watermark(events, DELAY_MS)
    expected = project(replay_dump(events, final))
    rng = random.Random(seed)
    model = run_model_in_batches(
        events, rng, DELAY_MS, content_refs=seed % 2 == 0, max_batch=rng.choice([3, 10, 40])
    )
    assert model.late == 0
    assert model.dump() == expected


def test_admin_events_change_the_replayed_tables():
    """The generator's admin events are not no-ops: without them the state differs."""
    changed = 0
    for seed in range(10):
        lines = admin_history(seed)
        events = [parse_event(line) for line in lines]
        final = default_watermark(events, DELAY_MS)
        plain = [e for e in events if not e.eventType.endswith(("_PERM", "_TOPIC", "_KV"))]
        changed += replay_dump(events, final) != replay_dump(plain, final)
    assert changed >= 8
