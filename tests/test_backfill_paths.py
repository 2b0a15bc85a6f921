"""Stage one reads each archive file by the path the file source lists (the source ships no
content): names Hadoop's paths could spell differently from the file system still read the
files' bytes, plain and gzipped, and the tables are the sequential replay's."""

from __future__ import annotations

import gzip
import random

import pytest

from tests.support.helpers import fixture_lines, reference_dump, split_lines

pytestmark = pytest.mark.spark


def test_files_with_unusual_names_are_read_by_path(backfill, tmp_path):
    """One backfill (CPU: one local Spark backfill of 20 brokers) over a folder of oddly named
    files, plain and gzipped, and a file named on its own."""
    lines = fixture_lines("20_random_fleet_seed202")
    chunks = split_lines(lines, 5, random.Random(5))
    folder = tmp_path / "in put %20#1"
    folder.mkdir()
    names = ["a b.jsonl", "pct%41%.jsonl", "hash#[x].jsonl", "plain.jsonl.gz"]
    for name, chunk in zip(names, chunks[:4], strict=True):
        text = "".join(line + "\n" for line in chunk).encode()
        (folder / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    single = tmp_path / "odd {name} %2F.jsonl"
    single.write_text("".join(line + "\n" for line in chunks[4]))
    assert backfill([folder, single]) == reference_dump(lines)
