"""The Spark jobs' entry files, inside the package so an installed wheel can spark-submit them:
`spark-submit "$(routectl job-path route_state)" [routectl run flags]`, or run them with
`python -m routing_lib.jobs.route_state` / `python -m routing_lib.jobs.backfill`."""

from __future__ import annotations

import sys
from pathlib import Path

JOBS = ("route_state", "backfill")
_COMMAND = {"route_state": "run", "backfill": "backfill"}


def entry_file(job: str) -> Path:
    """The file spark-submit runs for `job` (one of JOBS)."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r} (one of {', '.join(JOBS)})")
    return Path(__file__).resolve().parent / f"{job}.py"


def run(job: str) -> None:
    """`routectl <the job's command> <argv>`: one code path for routectl and spark-submit."""
    from routing_lib.cli import entry

    sys.argv[1:1] = [_COMMAND[job]]
    entry()
