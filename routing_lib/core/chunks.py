"""Where a large value is cut into content-addressed chunks, and the open-interval codec.

A 10 000-topic table stored as one file is rewritten whole by a one-topic change. Cut into
chunks whose edges depend only on the topic names near them (content-defined chunking, as
rsync or restic do for bytes), a change rewrites the chunk or two around the changed topic and
the list of chunk digests; every other chunk keeps its bytes and so its digest and file.

The cuts only decide how a text is stored: the chunks are consecutive slices of the text, so
joining them gives it back exactly whatever the cuts are. They are placed well for the two
layouts of the topic tables (routing_lib/core/wire.py, core/topic_table.py): names joined by
US, then RS and a JSON list of flat rows, one per name; or names alone. A cut goes before
every name whose CRC-32 has its low `CUT_BITS` bits zero (one name in 256 on average), in the
names and at the same row in the rows. Any other text gets no cut.

The open topic intervals of a group (`[["topic",since],...]`, core/history.py) change their
`since` values on every return of the group even when its topics are the ones it had before.
`split_opens` separates the names (stored as content, the same digest for the same names in the
same order) from the runs of equal `since` values (a few numbers, kept beside the reference),
so a return with a known topic set names no new content.
"""

from __future__ import annotations

import json
import zlib
from functools import lru_cache
from itertools import accumulate, groupby

RS, US = "\x1e", "\x1f"
CUT_BITS = 8
_CUT_MASK = (1 << CUT_BITS) - 1


# Topic names repeat across a fleet's groups and a group's registrations: a cold start cuts
# 10 000 names per table, most of them names another group has.
@lru_cache(maxsize=1 << 17)
def _is_cut(name: str) -> bool:
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) & _CUT_MASK == 0


def chunk_cuts(text: str) -> list[int]:
    """Increasing offsets strictly inside `text` where its chunks begin (none: one chunk)."""
    names_end = text.find(RS)
    names_text = text if names_end < 0 else text[:names_end]
    if not names_text:
        return []
    names = names_text.split(US)
    starts = [0, *accumulate(len(name) + 1 for name in names[:-1])]
    cut_rows = [i for i in range(1, len(names)) if _is_cut(names[i])]
    cuts = [starts[i] for i in cut_rows]
    if names_end < 0:
        return cuts
    cuts.append(names_end)  # the rows begin a chunk of their own
    rows = text[names_end + 1 :]
    if len(rows) < 4 or not rows.startswith("[[") or not rows.endswith("]]"):
        return cuts
    parts = rows[1:-1].split("],[")
    if len(parts) != len(names):
        return cuts  # not one flat row per name: the rows stay one chunk
    # entry i+1 of "[a],[b],..." starts where the first i+1 entries and their separators end
    row_starts = [0, *(end - 1 for end in accumulate(len(part) + 3 for part in parts[:-1]))]
    offset = names_end + 2  # RS and the list's "["
    cuts += [offset + row_starts[i] for i in cut_rows]
    return cuts


def split_opens(text: str) -> tuple[str, list[list[int]]] | None:
    """An open-interval text `[["topic",since],...]` as (names joined by US, runs of equal
    `since` values as [since, count]); None for any other text, or one that would not come
    back byte for byte from `join_opens`."""
    if not text.startswith('[["'):
        return None
    try:
        pairs = json.loads(text)
        if not all(type(pair) is list and len(pair) == 2 for pair in pairs):
            return None
        names = [pair[0] for pair in pairs]
        sinces = [pair[1] for pair in pairs]
    except (ValueError, TypeError, RecursionError):
        return None
    if not all(type(name) is str for name in names) or not all(type(s) is int for s in sinces):
        return None
    names_text = US.join(names)
    if names_text.count(US) != len(names) - 1 or RS in names_text:
        return None  # a name holding a separator would not split back into itself
    # join_opens rebuilds exactly `pairs` from these parts, so this is its byte-for-byte check
    if json.dumps(pairs, separators=(",", ":")) != text:
        return None
    runs = [[since, sum(1 for _ in group)] for since, group in groupby(sinces)]
    return names_text, runs


def join_opens(names_text: str, runs: list[list[int]]) -> str:
    """The open-interval text `split_opens` took apart."""
    names = names_text.split(US)
    if sum(count for _, count in runs) != len(names) or any(
        type(v) is not int for run in runs for v in run
    ):
        raise ValueError(f"{len(names)} names but runs {str(runs)[:100]} of interval starts")
    sinces: list[int] = []
    for since, count in runs:
        sinces += [since] * count
    return json.dumps([[n, s] for n, s in zip(names, sinces, strict=True)], separators=(",", ":"))
