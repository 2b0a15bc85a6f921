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


def _preload() -> None:
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
