"""Build topic_base's base index file in a process of its own (`python -m
routing_lib.lookup.base_build WAREHOUSE VERSION OUT`).

A whole read of topic_base at 3 M rows, its sort and its encodings allocate a few hundred MB
that Arrow's and the C heap's allocators keep after they are freed: in the serving process
that is resident memory for good (228 MB measured at 1 M rows, for 37 MB of index). Built in
a short-lived process, they go back to the system when it exits; the serving processes only
map the file it wrote (shared_index.py). A fresh interpreter, not a fork: the server has
threads (delta-rs' runtime, the refresher) that a forked child would miss.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from routing_lib.core.catalog import TOPIC_BASE
from routing_lib.lookup.base_index import QUEUE_COLUMNS, BaseIndex
from routing_lib.read.warehouse import open_version

# Below this many topic_base rows the build's transient memory is small: build in process
# (a fresh interpreter costs ~1 s of imports).
SUBPROCESS_ROWS = 200_000


def record_batch(warehouse: str | Path, version: int) -> pa.RecordBatch:
    rows = open_version(warehouse, TOPIC_BASE, version).to_pyarrow_table(
        columns=["topic", "broker_name", *QUEUE_COLUMNS]
    )
    return BaseIndex.record_batch(rows)


def write(warehouse: str | Path, version: int, out: Path) -> None:
    BaseIndex(record_batch(warehouse, version), version).save(out)


def write_in_subprocess(warehouse: str | Path, version: int, out: Path) -> None:
    """`write` in a process of its own; raises with its error output if it fails."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "routing_lib.lookup.base_build",
            str(warehouse),
            str(version),
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the base index failed: {done.stderr.strip()[-2000:]}")


def main(argv: list[str]) -> int:
    warehouse, version, out = argv
    write(warehouse, int(version), Path(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
