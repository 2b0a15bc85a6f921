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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("routelake.lookup")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


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
