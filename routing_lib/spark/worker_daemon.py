"""The Python worker daemon of local sessions: pyspark.daemon, with routelake's worker-side
modules imported before it forks its workers (`spark.python.daemon.module`, set by
routing_lib/spark/session.py for a local master).

Spark starts one daemon per executor and forks a worker from it per concurrent task; a worker
then imported pandas, pyarrow, pydantic and routing_lib itself while unpickling its first
function (py-spy of the 60 x 8 000 backfill: ~1.6 CPU-s per worker process, two of them per
run, on the path of the first tasks). Imported here, once, the forked workers share them.
The imports also install the zip-import fix (zip_imports.py) and prime it, so no worker
re-reads pyspark's archives.

Only for local masters: on a cluster the package may reach the executors as a --py-files zip
that a worker adds to its path per task, where a daemon could not import it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

# The archives Spark puts first on a Python worker's path: pyspark's sources and py4j's
# (SPARK_HOME/python/lib). A pip-installed pyspark is its own SPARK_HOME.
_BUNDLED_ARCHIVES = ("pyspark.zip", "py4j-")


def installed_copies(path: list[str]) -> list[str]:
    """The entries of `path` that are archives bundled inside a pyspark package that is
    importable from `path` itself (…/site-packages/pyspark/python/lib/pyspark.zip with
    …/site-packages on the path): the same sources as that package, which pip compiled.
    Imported from the archive, every module is compiled from its source again in each
    daemon (no .pyc in a zip): ~0.5 CPU-s of the daemon's ~1.1 s of imports, before it
    forks its first worker."""
    entries = {str(Path(entry).resolve()) for entry in path if entry}
    copies = []
    for entry in path:
        archive = Path(entry)
        if not archive.name.startswith(_BUNDLED_ARCHIVES) or archive.suffix != ".zip":
            continue
        lib = archive.resolve().parent
        package = lib.parent.parent  # …/pyspark/python/lib -> …/pyspark
        if (
            lib.name == "lib"
            and lib.parent.name == "python"
            and package.name == "pyspark"
            and (package / "__init__.py").is_file()
            and str(package.parent) in entries
        ):
            copies.append(entry)
    return copies


def _prefer_installed_pyspark() -> None:
    """Put pyspark's bundled archives behind the installed package they were bundled with
    (module docstring of `installed_copies`); anything only in an archive stays importable."""
    copies = installed_copies(sys.path)
    for entry in copies:
        sys.path.remove(entry)
    sys.path.extend(copies)


def _preload() -> None:
    _prefer_installed_pyspark()
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
