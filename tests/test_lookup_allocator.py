"""The lookup's allocator setting: large blocks freed go back to the system at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from routing_lib.lookup.allocator import JEMALLOC_ENV, LOOKUP_JEMALLOC_CONF, fix_mmap_threshold

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


# In a fresh process (deltalake's jemalloc configured from the environment when it loads):
# a small Delta table read 200 times by 8 threads, as the lookup's builds read the small
# tables. Prints the MiB of anonymous memory the reads added after a warm-up.
DELTA_READS = textwrap.dedent(
    """
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from deltalake import DeltaTable

    def anon_mib():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024

    def read(_):
        return DeltaTable(sys.argv[1]).to_pyarrow_table().num_rows

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(read, range(16)))
        before = anon_mib()
        list(pool.map(read, range(200)))
        print(anon_mib() - before)
    """
)


def _kept_by_reads(table: Path, conf: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if k != JEMALLOC_ENV}
    if conf is not None:
        env[JEMALLOC_ENV] = conf
    out = subprocess.run(
        [sys.executable, "-c", DELTA_READS, str(table)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status")
def test_deltalakes_allocator_keeps_nothing_after_small_reads_with_the_lookups_conf(tmp_path):
    table = tmp_path / "t"
    rows = pa.table({"k": [f"broker-{i}" for i in range(600)], "v": list(range(600))})
    for _ in range(5):
        write_deltalake(str(table), rows, mode="append")
    # measured: ~1 MiB with the lookup's conf, 17-18 MiB with jemalloc's defaults
    assert _kept_by_reads(table, LOOKUP_JEMALLOC_CONF) < 5
    assert _kept_by_reads(table, None) > 8  # what the conf is for (the test can fail)
