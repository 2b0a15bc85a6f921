"""The lookup's allocator setting: large blocks freed go back to the system at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from routing_lib.lookup.allocator import fix_mmap_threshold

# In a fresh process: a 16 MiB block freed (glibc then raises its dynamic mmap threshold to
# 16 MiB), then 40 blocks of 2 MiB with small long-lived objects between them, freed with no
# malloc_trim. Prints the MiB of RSS the freeing gave back.
FRAGMENTING = textwrap.dedent(
    """
    import sys
    from routing_lib.lookup.allocator import fix_mmap_threshold

    def rss_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024

    if sys.argv[1] == "fixed":
        assert fix_mmap_threshold()
    big = bytearray(16 << 20)
    del big
    keep, blocks = [], []
    for _ in range(40):
        blocks.append(bytearray(2 << 20))
        keep.append(bytearray(100))
    before = rss_mib()
    del blocks
    print(before - rss_mib())
    """
)


def _given_back(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENTING, mode], capture_output=True, text=True, check=True
    )
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_fixed_mmap_threshold_gives_large_freed_blocks_back():
    if not fix_mmap_threshold():
        pytest.skip("not glibc")
    # 80 MiB freed: all of it back with the fixed threshold (with the dynamic one, glibc 2.36
    # here kept ~16 MiB of the blocks below its raised threshold in the heap: 64 back)
    assert _given_back("fixed") >= 78
