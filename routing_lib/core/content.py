"""Content-addressed text: a large value stored once and passed on as a short reference.

A broker re-sends its whole topic table with every registration (10 000 topics: ~400 KB packed),
almost always unchanged, and a group's own topics and open topic intervals sit in its state.
Carried as text, each of them would cross Arrow, the shuffle and the state store on every
registration and every step. Instead, a value past a size threshold is put into the content
store and replaced by its reference: a marker character and the digest of the text. The
reference names the content and nothing else, so:

- any process that holds the reference reads the same text (from its own memory, or from a
  backend: a folder of the job's checkpoint, written before the reference leaves the process);
- a retried micro-batch computes the same references and writes the same files (a file is
  written once, atomically, and never changed), so nothing depends on which attempt wrote it;
- "this registration's topics are unchanged" is a comparison of two references.

The digest is BLAKE2b with 128 bits: an accidental collision is out of reach (2^64 values
before one is likely). Pure Python; the folder backend lives in routing_lib/content_files.py.

A large text is stored in chunks (routing_lib/core/chunks.py): each chunk is content of its
own, and the text's reference is a *chunked reference* (MANIFEST_MARK and the digest of its
manifest: a header line, then the chunks' digests in order). A one-topic change of a
10 000-topic table writes a chunk or two and the manifest; an unchanged chunk is not written
again. A group's open topic intervals are stored as an *opens value* (OPENS_MARK, the reference
of their topic names, the runs of their start times): a return of the group with a topic set
seen before names only content that is already there.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from functools import partial
from typing import Protocol

from routing_lib.core.chunks import chunk_cuts, join_opens, split_opens

REF_MARK = "\x1d"  # ASCII group separator: never in JSON text or a topic name
MANIFEST_MARK = "\x1c"  # ASCII file separator: a chunked reference (its manifest's digest)
OPENS_MARK = "\x1a"  # an opens value: names reference + runs of start times (not a reference)
MANIFEST_HEADER = "routelake-chunks 1\n"
_REF_LENGTH = 1 + 32
# Texts from this size are stored in chunks (a 10 000-topic table is ~400 KB; a 100-topic one
# stays one file).
CHUNK_MIN_CHARS = 32 * 1024
# An opens value keeps its runs inline up to this size; longer runs go to a content file.
_INLINE_RUNS_CHARS = 1024
_MEMO_LIMIT = 100_000


class ContentBackend(Protocol):
    """Durable storage of content by reference (written once, never changed).

    `read` answers None when the backend has no content for the reference; any other failure
    (storage errors that outlived the backend's retries, content that does not match its
    digest) raises one of CONTENT_FAILURES."""

    name: str

    def read(self, ref: str) -> str | None: ...

    def write(self, ref: str, text: str) -> None: ...


def content_ref(text: str) -> str:
    return REF_MARK + content_digest(text.encode("utf-8", "surrogatepass"))


def content_digest(data: bytes) -> str:
    """The digest a content file's bytes must have: the one its reference names."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def is_ref(value: str | None) -> bool:
    """A content reference: plain (the text's digest) or chunked (its manifest's digest)."""
    return value is not None and len(value) == _REF_LENGTH and value[0] in (REF_MARK, MANIFEST_MARK)


def is_chunked_ref(value: str | None) -> bool:
    return is_ref(value) and value is not None and value[0] == MANIFEST_MARK


def is_opens_value(value: str | None) -> bool:
    """An opens value: OPENS_MARK, the names' reference, then the runs (JSON, or a reference)."""
    if value is None or not value.startswith(OPENS_MARK):
        return False
    runs = value[1 + _REF_LENGTH :]
    return is_ref(value[1 : 1 + _REF_LENGTH]) and (runs.startswith("[") or is_ref(runs))


Piece = tuple[str, int, int]  # a chunk's plain reference, its start and end in the text


def manifest_text(pieces: list[Piece]) -> str:
    return MANIFEST_HEADER + "\n".join(ref[1:] for ref, _, _ in pieces)


def manifest_digests(text: str) -> list[str] | None:
    """The chunk digests a manifest lists; None if `text` is not a manifest."""
    if not text.startswith(MANIFEST_HEADER):
        return None
    body = text[len(MANIFEST_HEADER) :]
    return body.split("\n") if body else []


class MissingContentError(LookupError):
    """A reference whose content no backend of this process has."""


class CorruptContentError(MissingContentError):
    """A content file whose bytes do not hash to the reference it is stored under."""


class ContentStorageError(OSError):
    """The storage under a backend kept failing after its retries (a throttled or unreachable
    object store, a full or failing disk)."""


# What must stop the task rather than turn an event into a dead letter: the event is valid,
# its content is not readable or writable now. The task fails, Spark retries it, and past its
# retries the query stops with the error's message (routing_lib/spark/failures.py).
CONTENT_FAILURES: tuple[type[Exception], ...] = (MissingContentError, ContentStorageError)

RECOVERY_HINT = (
    "Restore the content folder together with the checkpoint it belongs to (from the same "
    "backup), or start the job from a fresh checkpoint and backfill the history "
    '(docs/troubleshooting.md, "Missing or corrupt content").'
)


def missing_message(ref: str, places: list[str]) -> str:
    where = "; ".join(places) if places else "no content folder is attached in this process"
    return f"no content for reference {ref[1:]}: {where}. {RECOVERY_HINT}"


class ContentStore:
    """A process's view of the content: an LRU of texts by reference, over its backends.

    Content that no backend holds yet (a pure-Python run) is pinned in memory: evicting it would
    lose it. Everything else can be read again, so the cache is bounded by `max_bytes`.
    """

    def __init__(
        self,
        max_bytes: int = 512 * 1024 * 1024,
        freshness_s: float = 300.0,
        chunk_min_chars: int = CHUNK_MIN_CHARS,
    ):
        self.max_bytes = max_bytes
        # A reference leaves this process only if its backend file was written or touched
        # within this many seconds: the collector's grace period is longer, so it never
        # deletes a file that a reference about to be committed names (docs/architecture.md).
        self.freshness_s = freshness_s
        self.chunk_min_chars = chunk_min_chars
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._pieces: dict[str, list[Piece]] = {}  # chunked ref -> its chunks, while cached
        self._bytes = 0
        self._pinned: set[str] = set()
        self._backends: dict[str, ContentBackend] = {}
        self._written: dict[str, set[str]] = {}  # backend name -> refs it is known to hold
        # backend name -> ref -> when this process last wrote or touched its file (monotonic)
        self._ensured_at: dict[str, dict[str, float]] = {}
        self._ref_by_id: dict[int, str] = {}  # id(text) -> ref, for texts handed out by `get`
        # a large text's plain digest -> its chunked reference (a pure function: an unchanged
        # table read again from a record is hashed once, not cut again)
        self._chunked_by_digest: OrderedDict[str, str] = OrderedDict()
        self.backend_reads = 0
        self.backend_writes = 0
        # inside deferred_writes: backend name -> the references queued (and their backend)
        self._deferred: dict[str, dict[str, ContentBackend]] | None = None
        self._after_deferred: list[Callable[[], None]] = []  # when_durable's, in order

    # -- backends ----------------------------------------------------------------------------
    def attach(self, backend: ContentBackend) -> ContentBackend:
        """Read misses from `backend` too; returns the attached instance (one per name)."""
        attached = self._backends.setdefault(backend.name, backend)
        self._written.setdefault(attached.name, set())
        self._ensured_at.setdefault(attached.name, {})
        return attached

    # -- writing -----------------------------------------------------------------------------
    def put(self, text: str, backend: ContentBackend | None = None) -> str:
        """The reference of `text`, keeping the text in memory and, with a backend, durable
        there before this returns. From `chunk_min_chars` on, a text with cuts
        (routing_lib/core/chunks.py) gets a chunked reference."""
        ref = self._known_ref(text)
        if ref is None or not is_ref(ref):
            ref = self._take(text)
        self.ensure(ref, backend)
        return ref

    def _take(self, text: str) -> str:
        plain = content_ref(text)
        if len(text) < self.chunk_min_chars:
            self._remember(plain, text)
            return plain
        known = self._chunked_by_digest.get(plain)
        if known is not None and known in self._texts:
            self._texts.move_to_end(known)
            return known
        cuts = chunk_cuts(text)
        if not cuts:
            self._remember(plain, text)
            return plain
        edges = [0, *cuts, len(text)]
        pieces = [(content_ref(text[a:b]), a, b) for a, b in zip(edges, edges[1:], strict=False)]
        ref = MANIFEST_MARK + content_ref(manifest_text(pieces))[1:]
        self._chunked_by_digest[plain] = ref
        if len(self._chunked_by_digest) > _MEMO_LIMIT:
            self._chunked_by_digest.popitem(last=False)
        self._remember(ref, text, pieces)
        return ref

    def put_opens(self, text: str, backend: ContentBackend | None = None) -> str:
        """A group's open topic intervals as an opens value (OPENS_MARK, the reference of their
        names, their start times as runs), or as `put` stores it if it is not that layout.
        Start times change with every return of the group; the names rarely do."""
        known = self._known_ref(text)
        if known is not None and (is_opens_value(known) or is_ref(known)):
            self._ensure_value(known, backend)
            return known
        parts = split_opens(text)
        if parts is None:
            return self.put(text, backend)
        names_text, runs = parts
        runs_json = json.dumps(runs, separators=(",", ":"))
        if len(runs_json) > _INLINE_RUNS_CHARS:
            runs_json = self.put(runs_json, backend)
        value = OPENS_MARK + self.put(names_text, backend) + runs_json
        self._remember(value, text)
        self._written_like(value)
        return value

    def _ensure_value(self, value: str, backend: ContentBackend | None) -> None:
        for ref in _refs_of_opens(value) if is_opens_value(value) else [value]:
            self.ensure(ref, backend)
        if is_opens_value(value):
            self._written_like(value)

    def _written_like(self, value: str) -> None:
        """An opens value is as durable as the references in it."""
        refs = _refs_of_opens(value)
        for written in self._written.values():
            if all(ref in written for ref in refs):
                written.add(value)
        if value in self._texts and not self._durable(value):
            self._pinned.add(value)
        else:
            self._pinned.discard(value)

    def ensure(self, ref: str, backend: ContentBackend | None) -> None:
        """Make the content of `ref` durable in `backend`: written, or touched if there, unless
        this process did so within `freshness_s` seconds. A chunked reference's chunks are
        made durable before its manifest. Inside `deferred_writes`, queued for its end."""
        if backend is None:
            if ref in self._texts and not self._durable(ref):
                self._pinned.add(ref)
            return
        backend = self.attach(backend)
        ensured_at = self._ensured_at[backend.name]
        if time.monotonic() - ensured_at.get(ref, -math.inf) < self.freshness_s:
            return
        if self._deferred is not None:
            self._deferred.setdefault(backend.name, {}).setdefault(ref, backend)
            return
        self._write_durable(backend, [ref])

    @contextmanager
    def deferred_writes(self) -> Iterator[None]:
        """`ensure` within the block queues its writes; leaving it writes them all side by side
        (every chunk, then every manifest and single file) before they count as durable. So a
        reference made within may leave the process only after the block: stage one
        classifies a whole frame of records, then writes their new tables' chunks in one
        round of fsyncs instead of one round per table. On an exception nothing queued is
        written (the task fails; its texts stay in memory, not durable, written when next
        ensured)."""
        if self._deferred is not None:  # nested: the outer block writes
            yield
            return
        self._deferred = {}
        try:
            yield
            queued, self._deferred = self._deferred, None
            for refs in queued.values():
                self._write_durable(next(iter(refs.values())), list(refs))
            for action in self._after_deferred:
                action()
        finally:
            self._deferred = None
            self._after_deferred = []

    def when_durable(self, action: Callable[[], None]) -> None:
        """Run `action` once what `ensure` made durable so far is written: now, or at the end
        of the enclosing `deferred_writes` block (dropped if the block fails). For what tells
        other processes about a reference (routing_lib/shared_tables.py)."""
        if self._deferred is None:
            action()
        else:
            self._after_deferred.append(action)

    def _write_durable(self, backend: ContentBackend, refs: list[str]) -> None:
        """Write or touch these references' files (chunks first, side by side), then record
        them as durable in `backend`."""
        ensured_at = self._ensured_at[backend.name]
        now = time.monotonic()
        chunks: dict[str, str] = {}
        finals: list[tuple[str, str]] = []
        for ref in refs:
            text = self.get(ref)
            if is_chunked_ref(ref):
                pieces = self._pieces[ref]
                for piece_ref, start, end in pieces:
                    if now - ensured_at.get(piece_ref, -math.inf) >= self.freshness_s:
                        chunks.setdefault(piece_ref, text[start:end])
                finals.append((ref, manifest_text(pieces)))
            else:
                finals.append((ref, text))
        _write_all(backend, list(chunks.items()))
        self.backend_writes += len(chunks)
        for piece_ref in chunks:
            ensured_at[piece_ref] = now
        _write_all(backend, finals)
        self.backend_writes += len(finals)
        for ref, _ in finals:
            ensured_at[ref] = now
            self._written[backend.name].add(ref)
            self._pinned.discard(ref)

    # -- reading -----------------------------------------------------------------------------
    def get(self, ref: str) -> str:
        text = self._texts.get(ref)
        if text is not None:
            self._texts.move_to_end(ref)
            return text
        if is_opens_value(ref):
            return self._opens_text(ref)
        for backend in reversed(self._backends.values()):  # the latest attached first
            stored = backend.read(ref)
            if stored is None:
                continue
            self.backend_reads += 1
            pieces: list[Piece] | None = None
            if is_chunked_ref(ref):
                stored, pieces = self._read_chunks(backend, ref, stored)
            self._written[backend.name].add(ref)
            self._remember(ref, stored, pieces)
            return stored
        raise MissingContentError(
            missing_message(ref, [_place(b, ref) for b in reversed(self._backends.values())])
        )

    def _read_chunks(
        self, backend: ContentBackend, ref: str, manifest: str
    ) -> tuple[str, list[Piece]]:
        digests = manifest_digests(manifest)
        if digests is None:
            raise CorruptContentError(f"content {ref[1:]} is not a chunk manifest. {RECOVERY_HINT}")
        chunks, pieces, offset = [], [], 0
        for digest in digests:
            piece_ref = REF_MARK + digest
            chunk = backend.read(piece_ref)
            if chunk is None:
                raise MissingContentError(
                    f"chunk {digest} of {ref[1:]}: "
                    + missing_message(piece_ref, [_place(backend, piece_ref)])
                )
            self.backend_reads += 1
            chunks.append(chunk)
            pieces.append((piece_ref, offset, offset + len(chunk)))
            offset += len(chunk)
        return "".join(chunks), pieces

    def _opens_text(self, value: str) -> str:
        names_ref, runs_part = value[1 : 1 + _REF_LENGTH], value[1 + _REF_LENGTH :]
        runs_json = self.get(runs_part) if is_ref(runs_part) else runs_part
        try:
            text = join_opens(self.get(names_ref), json.loads(runs_json))
        except (ValueError, TypeError, RecursionError) as exc:  # a damaged state
            raise CorruptContentError(
                f"open intervals {names_ref[1:]} do not match their start times: {exc}. "
                f"{RECOVERY_HINT}"
            ) from exc
        self._remember(value, text)
        self._written_like(value)
        return text

    def ref_of(self, text: str) -> str | None:
        """The reference of `text` if this store handed it out or took it (no hashing)."""
        return self._known_ref(text)

    def resolve(self, value: str) -> str:
        """`value` itself, or the content it references (a reference or an opens value)."""
        return self.get(value) if is_ref(value) or is_opens_value(value) else value

    # -- bookkeeping -------------------------------------------------------------------------
    def _known_ref(self, text: str) -> str | None:
        ref = self._ref_by_id.get(id(text))
        if ref is not None and self._texts.get(ref) is text:
            return ref
        return None

    def _durable(self, ref: str) -> bool:
        return any(ref in refs for refs in self._written.values())

    def _remember(self, ref: str, text: str, pieces: list[Piece] | None = None) -> None:
        if ref in self._texts:
            return
        self._texts[ref] = text
        if pieces is not None:
            self._pieces[ref] = pieces
        self._ref_by_id[id(text)] = ref
        self._bytes += len(text)
        if not self._backends:
            self._pinned.add(ref)
        self._evict()

    def _forget(self, ref: str) -> None:
        text = self._texts.pop(ref)
        self._pieces.pop(ref, None)
        self._ref_by_id.pop(id(text), None)
        self._bytes -= len(text)

    def _evict(self) -> None:
        if self._bytes <= self.max_bytes:
            return
        for ref in list(self._texts):
            if self._bytes <= self.max_bytes:
                break
            if ref in self._pinned or not self._durable(ref):
                continue
            self._forget(ref)

    def clear(self) -> None:
        """Forget every text and what the backends were known to hold, as a fresh process
        would (pinned texts stay: memory is their only copy)."""
        for ref in [r for r in self._texts if r not in self._pinned]:
            self._forget(ref)
        for refs in self._written.values():
            refs.clear()
        for ensured in self._ensured_at.values():
            ensured.clear()
        self._chunked_by_digest.clear()

    @property
    def cached_bytes(self) -> int:
        return self._bytes


_WRITERS: ThreadPoolExecutor | None = None
# a new 10 000-topic table is ~80 chunks; local writes wait on fsyncs, remote ones on PUTs
_WRITER_THREADS = 16


def in_parallel(calls: list[Callable[[], object]]) -> None:
    """Run the calls side by side on this process's one pool of content writers; every call
    has ended (or failed) before the first failure is raised."""
    global _WRITERS
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    if _WRITERS is None:  # created on first use: in the process that writes, after any fork
        _WRITERS = ThreadPoolExecutor(_WRITER_THREADS, thread_name_prefix="content-write")
    futures = [_WRITERS.submit(call) for call in calls]
    wait(futures)
    for future in futures:
        future.result()


def _write_all(backend: ContentBackend, items: list[tuple[str, str]]) -> None:
    """Write these (reference, text) items, side by side when there are several: each local
    write waits for its fsyncs (~4 ms here), and a new 10 000-topic table has ~80 chunks."""
    write_many = getattr(backend, "write_many", None)
    if write_many is not None and len(items) > 2:  # the backend batches them (content_files.py)
        write_many(items)
    elif len(items) <= 2:
        for ref, text in items:
            backend.write(ref, text)
    else:
        in_parallel([partial(backend.write, ref, text) for ref, text in items])


def _refs_of_opens(value: str) -> list[str]:
    refs = [value[1 : 1 + _REF_LENGTH]]
    runs_part = value[1 + _REF_LENGTH :]
    if is_ref(runs_part):
        refs.append(runs_part)
    return refs


def _place(backend: ContentBackend, ref: str) -> str:
    """Where `backend` looked for `ref`, as an operator finds it (a file and its checkpoint)."""
    describe = getattr(backend, "describe", None)
    return str(describe(ref)) if describe is not None else f"not in {backend.name}"


# One per process: a Spark Python worker serves stage one and the step across micro-batches.
CONTENT = ContentStore()
