"""The Python worker daemon of local sessions: pyspark.daemon, with routelake's worker-side
modules imported before it forks its workers (`spark.python.daemon.module`, set by
routing_lib/spark/session.py for a local master).

Spark starts one daemon per executor and forks a worker from it per concurrent task; a worker
then imported pandas, pyarrow, pydantic and routing_lib itself while unpickling its first
function (py-spy of the 60 x 8 000 backfill: ~1.6 CPU-s per worker process, two of them per
run, on the path of the first tasks). Imported here, once, the forked workers share them.
The imports also install the zip-import fix (zip_imports.py) and prime it, so no worker
re-reads pyspark's archives.

Spark puts its pyspark.zip and py4j zip first on the daemon's path. A zip holds sources only,
so every module of them was compiled again at each daemon start (~0.5 CPU-s of the preload,
on the path of the first micro-batch's first task); the same versions installed beside the
interpreter have their compiled files. So when the installed package is the zip's version,
the zip moves behind it (`prefer_installed_packages`).

Only for local masters: on a cluster the package may reach the executors as a --py-files zip
that a worker adds to its path per task, where a daemon could not import it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import re
import sys
import zipfile
from pathlib import Path

# Spark's archives on a worker's path and the package each holds (SPARK_HOME/python/lib)
_SPARK_ARCHIVES = {
    "pyspark": re.compile(r"(^|/)pyspark\.zip$"),
    "py4j": re.compile(r"(^|/)py4j-[^/]*-src\.zip$"),
}


def prefer_installed_packages(path: list[str]) -> list[str]:
    """`path` with each of Spark's archives moved to its end when the interpreter has the same
    package installed elsewhere on it (the same version.py, byte for byte)."""
    for package, pattern in _SPARK_ARCHIVES.items():
        archives = [entry for entry in path if pattern.search(entry)]
        others = [entry for entry in path if entry not in archives]
        if len(archives) == 1 and _same_version(package, archives[0], others):
            path = others + archives
    return path


def _same_version(package: str, archive: str, others: list[str]) -> bool:
    spec = importlib.machinery.PathFinder.find_spec(package, others)
    if spec is None or not spec.submodule_search_locations:
        return False
    installed = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        with zipfile.ZipFile(archive) as zipped:
            return zipped.read(f"{package}/version.py") == installed.read_bytes()
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def _preload() -> None:
    sys.path[:] = prefer_installed_packages(sys.path)
    # what stage one and the step import: the functions' modules and the pandas UDF machinery
    for module in (
        "pyspark.worker",
        "pyspark.sql.pandas.serializers",
        "routing_lib.spark.sources",
        "routing_lib.spark.stateful",
    ):
        importlib.import_module(module)
    # the zip-import fix records each archive's directory as read now: the workers inherit it
    importlib.invalidate_caches()


def main() -> None:
    _preload()
    from pyspark import daemon  # reads sys.argv[1], the worker module, as `python -m` left it

    daemon.manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
