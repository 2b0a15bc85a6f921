"""The lookup workers' replacement back-off as a policy (pure: no process, no socket); the
processes themselves are in test_lookup_workers.py."""

from __future__ import annotations

import asyncio
import signal

from routing_lib.lookup.workers import Workers, backoff_s


def test_the_back_off_doubles_from_a_second_to_a_minute():
    assert [backoff_s(n) for n in range(9)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]


def test_a_worker_that_ran_a_minute_is_replaced_at_once_and_one_that_did_not_waits(tmp_path):
    now = [0.0]
    workers = Workers(1, tmp_path, clock=lambda: now[0])

    async def ends_after(seconds: float, pid: int) -> float:
        workers._started(0, pid)
        now[0] += seconds
        workers._ended(pid, -signal.SIGKILL)
        (backoff,) = [f for f in workers.families() if f.name.endswith("_backoff_seconds")]
        return backoff.samples[0].value

    async def scenario() -> list[float]:
        return [
            await ends_after(60.0, 101),  # stable: at once
            await ends_after(5.0, 102),  # quick: 1 s
            await ends_after(5.0, 103),  # quick again: 2 s
            await ends_after(61.0, 104),  # stable again: the back-off starts over
        ]

    assert asyncio.run(scenario()) == [0, 1, 2, 0]
    assert workers.exits == 4
