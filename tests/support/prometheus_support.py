"""Debian's prometheus and promtool (scripts/setup.sh installs them as root): where they are,
and a skip that says how to get them (a failure under CI, which installs them)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"


def tool(name: str) -> str:
    """The path of `prometheus` or `promtool`; skips the test without it (fails under CI)."""
    found = shutil.which(name)
    if found is None:
        message = f"no {name}: as root, apt-get install -y prometheus (scripts/setup.sh does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
