"""Scripts that read Delta tables with delta-rs exit 0 (docs/troubleshooting.md).

`DeltaTable(path).to_pyarrow_table()` scans a pyarrow dataset through deltalake's Python file
system. pyarrow 19 returns the table before its I/O threads have finished the scan's read-ahead;
their last step frees buffers that belong to Python objects, which takes the GIL. If the
interpreter is finalizing by then, Python ends such a thread with pthread_exit, and unwinding it
through a C++ destructor aborts the process: exit 134, "terminate called without an active
exception", after a good run.

Python runs its atexit handlers before it finalizes, with the interpreter intact: the handler
installed here gives up the GIL for a moment in a process that used pyarrow, so those threads
finish first. The project's environment installs it in every interpreter it starts through a
`.pth` file (`python -m routing_lib.clean_exit`, run by scripts/setup.sh): analysts' scripts get
it without importing anything.
"""

from __future__ import annotations

import atexit
import sys
import sysconfig
import time
from pathlib import Path

# Long enough for the read-ahead's tail (a few milliseconds) on a loaded machine: 0 aborts in
# 40 runs measured with 0.1 s, where a third of the runs aborted without it.
ARROW_TAIL_S = 0.1
PTH_NAME = "routelake-clean-exit.pth"
# A .pth line starting with "import" is executed at every interpreter start (the site module).
# The .pth line registers the same wait without importing routing_lib: importing it at start-up
# would take it from the first sys.path entry that has it (a spark-submit --py-files zip before
# the checkout), not from where the program later expects it.
# (Once: site may read the same site-packages twice, through a lib64 link.)
PTH_LINE = (
    "import atexit, sys, time; getattr(sys, '_routelake_exit_wait', 0) or ("
    "setattr(sys, '_routelake_exit_wait', 1), "
    # default arguments: site runs the line with its own globals, which lack `time`
    "atexit.register(lambda s=sys, t=time: "
    f"'pyarrow' in s.modules and t.sleep({ARROW_TAIL_S})))\n"
)

_installed = False


def _let_arrow_threads_finish() -> None:
    if "pyarrow" in sys.modules:  # nothing to wait for in processes that never used it
        time.sleep(ARROW_TAIL_S)


def install() -> None:
    """Register the exit wait (once per process; atexit runs it after handlers registered
    later, so as late as possible)."""
    global _installed
    if not _installed:
        _installed = True
        atexit.register(_let_arrow_threads_finish)


def write_pth(site_packages: Path | None = None) -> Path:
    """Install the `.pth` file into this interpreter's site-packages."""
    folder = site_packages or Path(sysconfig.get_paths()["purelib"])
    path = folder / PTH_NAME
    path.write_text(PTH_LINE)
    return path


if __name__ == "__main__":
    print(f"installed {write_pth()}")
