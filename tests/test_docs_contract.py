"""The repository's copy of the contract and its golden fixtures stay in step with shared/."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


@pytest.mark.skipif(not SHARED.is_dir(), reason="no ../shared beside this clone")
def test_contract_copy_is_identical_to_shared():
    shared = (SHARED / "spec" / "route-state-contract.md").read_text()
    assert (ROOT / "docs" / "contract.md").read_text() == shared


@pytest.mark.skipif(not SHARED.is_dir(), reason="no ../shared beside this clone")
def test_copied_fixtures_are_identical_to_shared():
    ours = ROOT / "tests" / "golden"
    for fixture in ours.iterdir():
        for item in fixture.iterdir():
            assert (
                item.read_bytes() == (SHARED / "golden" / fixture.name / item.name).read_bytes()
            ), item
