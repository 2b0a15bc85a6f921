"""The Spark jobs, one module each, one name each:

* `route_state` (routing_lib/jobs/route_state.py): the streaming job, Kafka -> Delta route
  tables; `routectl run`, `spark-submit jobs/route_state.py`, Spark app `routelake-route_state`.
* `backfill` (routing_lib/jobs/backfill.py): archived events -> the same tables;
  `routectl backfill`, `spark-submit jobs/backfill.py`, Spark app `routelake-backfill`.

Their spark-submit entry files live in routing_lib/jobs/submit/ (inside the package, so an
installed wheel can submit them: `spark-submit "$(routectl job-path route_state)"`). The jobs
never import the command line; the entry files and `routectl` do (tests/test_import_cycles.py).
"""

from __future__ import annotations

from pathlib import Path

# The routectl subcommand that runs each job: its flags are the entry file's flags.
COMMAND = {"route_state": "run", "backfill": "backfill"}
JOBS = tuple(COMMAND)


def entry_file(job: str) -> Path:
    """The file spark-submit runs for `job` (one of JOBS)."""
    if job not in COMMAND:
        raise ValueError(f"unknown job {job!r} (one of {', '.join(JOBS)})")
    return Path(__file__).resolve().parent / "submit" / f"{job}.py"


def app_name(job: str) -> str:
    """The Spark application name of `job` (what the Spark UI and a cluster's master list)."""
    return f"routelake-{job}"
