"""The C allocator's settings for the lookup's processes.

glibc serves an allocation of at least its mmap threshold with a mapping of its own, returned
to the system when freed; below it, from the heap or a thread's arena, where a freed block
stays with the process until the blocks around it are freed too. The threshold starts at
128 KiB and is *dynamic*: freeing a mapped block raises it to that block's size (up to
32 MiB). The lookup frees a snapshot's per-topic arrays (megabytes each at 3 M topics: counts,
present flags, masks) with every new snapshot, so after the first one they all came from the
heap, interleaved with small long-lived objects, and the process kept what it had freed:
RSS grew for the first tens of batches. A fixed threshold keeps every large array a mapping
of its own (measured at 3 M routes, `serve --workers 2`: RSS 787 -> 690 MB after the load,
981 -> 829 MB after 40 batches).

deltalake's Rust code (the log replay of every table read, the tokio runtime's threads) does
not use glibc: it allocates with a jemalloc of its own, configured by `_RJEM_MALLOC_CONF` when
it first allocates (on `import deltalake`). Its defaults suit a batch job, not a server that
reads a few small tables every second for days: 4 arenas per core, a cache of freed objects
in each of the tokio runtime's threads (tens of them, each reused by the next read), and freed
pages returned only after 10 s of decay, which in a forked worker (jemalloc's background
threads do not survive the fork) ran only when that arena allocated again. The lookup's RSS
grew with what those caches kept: at 3 M routes, `serve --workers 2`, 40 batches, the worker
+23 MB since the load and still growing; with `LOOKUP_JEMALLOC_CONF` +7 MB, flat from batch
10 (one arena, no thread caches, freed pages returned at once). Both halves are needed: no
thread caches alone, or immediate decay alone, left +22-23 MB. The cost is CPU in deltalake's
log replay: `settled_versions` (every table opened, once per poll) 40 -> 66 ms of process
CPU, a change-feed read and a small table's read 98 -> 110 ms (3 alternated pairs, load 8-12),
~3 % of a core per process at a poll a second. `serve` re-executes itself
once with it set (`with_jemalloc_conf`), as the setting must be in the environment before
deltalake loads; an operator's own `_RJEM_MALLOC_CONF` is kept.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger("routelake.lookup")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20
JEMALLOC_ENV = "_RJEM_MALLOC_CONF"  # deltalake's jemalloc is built with the _rjem_ prefix
LOOKUP_JEMALLOC_CONF = "narenas:1,tcache:false,dirty_decay_ms:0,muzzy_decay_ms:0"


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set glibc's mmap threshold (which also turns its dynamic adjustment off) for this
    process and the ones it forks. False where there is no glibc (musl, macOS): nothing
    changes there."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused: the allocator keeps its own")
    return done


def with_jemalloc_conf(conf: str = LOOKUP_JEMALLOC_CONF) -> None:
    """Unless `_RJEM_MALLOC_CONF` is set already: set it to `conf` and re-execute this
    process (the same pid and arguments), so that deltalake's jemalloc reads it when it loads.
    Only for a process that is `routectl serve` itself (not one calling the CLI in-process)."""
    if JEMALLOC_ENV in os.environ or sys.argv[1:2] != ["serve"]:
        return
    os.environ[JEMALLOC_ENV] = conf
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
