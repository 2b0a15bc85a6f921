"""An analyst's script exits cleanly: the plainest delta-rs read of every warehouse table, in a
script of its own, exits 0 every time (without routing_lib/clean_exit.py, which the project's
environment runs at every interpreter's exit, about half such runs aborted at exit: exit 134,
"terminate called without an active exception"; docs/troubleshooting.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from routing_lib.housekeeping import WAREHOUSE_TABLES
from tests.support.helpers import fixture_lines

pytestmark = pytest.mark.spark

RUNS = 20
# What docs/history-recipes.md's recipes do, and nothing else: no routelake import.
ANALYST_SCRIPT = """
import sys
from pathlib import Path
from deltalake import DeltaTable
for table in sorted(Path(sys.argv[1]).iterdir()):
    if (table / "_delta_log").is_dir():
        print(table.name, DeltaTable(str(table)).to_pyarrow_table().num_rows)
"""


@pytest.fixture(scope="module")
def warehouse(spark, config, tmp_path_factory) -> Path:
    """A golden fleet backfilled once, with one undecodable line (so the dead-letter table has
    a row to read too)."""
    from routing_lib.jobs.backfill import run_backfill

    root = tmp_path_factory.mktemp("clean-exit")
    lines = [*fixture_lines("20_random_fleet_seed101"), "not json"]
    (root / "events.jsonl").write_text("".join(line + "\n" for line in lines))
    run_backfill(config, [str(root / "events.jsonl")], str(root / "warehouse"), spark=spark)
    return root / "warehouse"


def test_the_environment_installs_the_exit_hook_in_every_interpreter():
    def exit_handlers(*flags: str) -> int:
        probe = "import atexit; print(atexit._ncallbacks())"
        done = subprocess.run(
            [sys.executable, *flags, "-c", probe], capture_output=True, text=True, check=True
        )
        return int(done.stdout)

    # scripts/setup.sh wrote the .pth file; -S (no site-packages .pth files) shows the baseline
    assert exit_handlers() == exit_handlers("-S") + 1
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print('routing_lib' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"  # the hook imports nothing of the project's


def test_reading_every_table_with_plain_delta_rs_exits_0_every_time(warehouse):
    tables = {p.name for p in warehouse.iterdir() if (p / "_delta_log").is_dir()}
    assert {"topic_queue_table", "dead_letter_table"} <= tables <= set(WAREHOUSE_TABLES)
    failures = []
    for run in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", ANALYST_SCRIPT, str(warehouse)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        read = dict(line.split() for line in done.stdout.splitlines())
        assert set(read) == tables, done.stdout + done.stderr
        assert int(read["dead_letter_table"]) == 1
        if done.returncode != 0 or "terminate called" in done.stderr:
            failures.append((run, done.returncode, done.stderr[-300:]))
    assert failures == [], f"{len(failures)} of {RUNS} runs failed at exit: {failures}"


def test_routectl_reading_commands_exit_0_through_interpreter_shutdown(warehouse):
    """routectl exits through the interpreter's normal shutdown (no os._exit)."""
    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-m", "routing_lib.cli", "dump", "--warehouse", str(warehouse)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-500:]
        assert json.loads(done.stdout)["brokerLiveTable"]
