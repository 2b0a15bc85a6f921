"""Folders named on routectl's command line are relative to the current directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from routing_lib.cli import main
from routing_lib.config import base_dir


def test_a_relative_warehouse_option_is_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["dump", "--warehouse", "wh"]) == 1
    assert f"warehouse {tmp_path / 'wh'} does not exist" in capsys.readouterr().err


def test_a_relative_warehouse_in_a_config_file_stays_relative_to_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "routelake.toml"
    config.write_text('[paths]\nwarehouse = "no-such-warehouse"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["dump", "--config", str(config)]) == 1
    assert f"warehouse {base_dir() / 'no-such-warehouse'} does not exist" in capsys.readouterr().err
