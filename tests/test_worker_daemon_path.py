"""The worker daemon imports pyspark and py4j from the installed packages (compiled files)
rather than from Spark's source-only zips, when they are the same version
(routing_lib/spark/worker_daemon.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from routing_lib.spark.worker_daemon import prefer_installed_packages


def _archive(where: Path, name: str, package: str, version: str) -> str:
    path = where / name
    with zipfile.ZipFile(path, "w") as zipped:
        zipped.writestr(f"{package}/__init__.py", "")
        zipped.writestr(f"{package}/version.py", version)
    return str(path)


def _installed(where: Path, package: str, version: str) -> str:
    (where / package).mkdir(parents=True)
    (where / package / "__init__.py").write_text("")
    (where / package / "version.py").write_text(version)
    return str(where)


def test_the_zips_go_behind_the_same_installed_versions(tmp_path):
    pyspark_zip = _archive(tmp_path, "pyspark.zip", "pyspark", "__version__ = '4.0.1'\n")
    py4j_zip = _archive(tmp_path, "py4j-0.10.9.9-src.zip", "py4j", "__version__ = '0.10.9.9'\n")
    site = _installed(tmp_path / "site", "pyspark", "__version__ = '4.0.1'\n")
    _installed(tmp_path / "site", "py4j", "__version__ = '0.10.9.9'\n")
    path = ["/cwd", pyspark_zip, py4j_zip, "/stdlib", site]
    assert prefer_installed_packages(path) == ["/cwd", "/stdlib", site, pyspark_zip, py4j_zip]


def test_another_installed_version_or_none_keeps_the_zip_first(tmp_path):
    pyspark_zip = _archive(tmp_path, "pyspark.zip", "pyspark", "__version__ = '4.0.1'\n")
    py4j_zip = _archive(tmp_path, "py4j-0.10.9.9-src.zip", "py4j", "__version__ = '0.10.9.9'\n")
    site = _installed(tmp_path / "site", "pyspark", "__version__ = '3.5.0'\n")
    path = [pyspark_zip, py4j_zip, site]  # no py4j installed at all
    assert prefer_installed_packages(path) == path
