"""The fuzz targets (tests/fuzz/targets.py) in the test command.

- every seed-corpus input and every input a fuzzer once crashed on (tests/fuzz/regressions)
  through its target, in-process (unit tier);
- each target under atheris (libFuzzer) for a fixed number of executions from its seed
  corpus, in a child Python: about 25 s of CPU for all of them (1.5 s each is start-up).
The long run by hand: scripts/fuzz.sh (docs/testing.md, "Fuzzing (atheris)").
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
# executions per target in the test command: sized by each target's speed here (exec/s:
# frames ~4 000, stage one ~5 000, HTTP 1 500-3 000, collector ~400 with its zlib bodies)
RUNS = {
    "remoting_frames": 10_000,
    "lookup_requests": 5_000,
    "collector_requests": 1_000,
    "event_json": 8_000,
    "lookup_http": 3_000,
    "console_http": 2_000,
    "content_refs": 10_000,
}


def _inputs(folder: Path) -> list[Path]:
    return sorted(path for path in folder.iterdir() if path.is_file()) if folder.is_dir() else []


def _dirs(folder: Path) -> list[Path]:
    return [path for path in folder.iterdir() if path.is_dir()] if folder.is_dir() else []


def test_every_target_has_a_seed_corpus_and_a_ci_budget():
    assert set(RUNS) == set(TARGETS)
    assert all(_inputs(CORPUS / name) for name in TARGETS)
    assert {p.name for p in _dirs(REGRESSIONS)} <= set(TARGETS)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_seed_and_regression_inputs(target: str):
    for path in _inputs(CORPUS / target) + _inputs(REGRESSIONS / target):
        try:
            TARGETS[target](path.read_bytes())
        except Exception as exc:
            raise AssertionError(f"{path.relative_to(ROOT)}: {exc!r}") from exc


@pytest.mark.parametrize("target", sorted(RUNS))
def test_fuzz_briefly(target: str, tmp_path: Path):
    """A fixed number of executions (and a fixed libFuzzer seed, so CI is repeatable) from a
    copy of the seed corpus; a crash, a hang (> 10 s on one input) or an RSS past 2 GB fails."""
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS / target, corpus)
    runs = RUNS[target]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz.run",
            target,
            f"-runs={runs}",
            "-seed=1",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = result.stderr[-4000:]
    assert result.returncode == 0, log
    assert re.search(rf"Done {runs} runs", result.stderr), log
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*")), log
