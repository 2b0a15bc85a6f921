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
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from typing import Protocol

REF_MARK = "\x1d"  # ASCII group separator: never in JSON text or a topic name
_REF_LENGTH = 1 + 32


class ContentBackend(Protocol):
    """Durable storage of content by reference (written once, never changed).

    `read` answers None when the backend has no content for the reference; any other failure
    (storage errors that outlived the backend's retries, content that does not match its
    digest) raises one of CONTENT_FAILURES."""

    name: str

    def read(self, ref: str) -> str | None: ...

    def write(self, ref: str, text: str) -> None: ...


def content_ref(text: str) -> str:
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
    return REF_MARK + digest.hexdigest()


def is_ref(value: str | None) -> bool:
    return value is not None and len(value) == _REF_LENGTH and value[0] == REF_MARK


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

    def __init__(self, max_bytes: int = 512 * 1024 * 1024, freshness_s: float = 300.0):
        self.max_bytes = max_bytes
        # A reference leaves this process only if its backend file was written or touched
        # within this many seconds: the collector's grace period is longer, so it never
        # deletes a file that a reference about to be committed names (docs/architecture.md).
        self.freshness_s = freshness_s
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0
        self._pinned: set[str] = set()
        self._backends: dict[str, ContentBackend] = {}
        self._written: dict[str, set[str]] = {}  # backend name -> refs it is known to hold
        # backend name -> ref -> when this process last wrote or touched its file (monotonic)
        self._ensured_at: dict[str, dict[str, float]] = {}
        self._ref_by_id: dict[int, str] = {}  # id(text) -> ref, for texts handed out by `get`
        self.backend_reads = 0
        self.backend_writes = 0

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
        there before this returns."""
        ref = self._known_ref(text)
        if ref is None:
            ref = content_ref(text)
            self._remember(ref, text)
        self.ensure(ref, backend)
        return ref

    def ensure(self, ref: str, backend: ContentBackend | None) -> None:
        """Make the content of `ref` durable in `backend`: written, or touched if there, unless
        this process did so within `freshness_s` seconds."""
        if backend is None:
            if ref in self._texts and not self._durable(ref):
                self._pinned.add(ref)
            return
        backend = self.attach(backend)
        ensured_at = self._ensured_at[backend.name]
        now = time.monotonic()
        if now - ensured_at.get(ref, -math.inf) < self.freshness_s:
            return
        text = self.get(ref)
        backend.write(ref, text)
        self.backend_writes += 1
        ensured_at[ref] = now
        self._written[backend.name].add(ref)
        self._pinned.discard(ref)

    # -- reading -----------------------------------------------------------------------------
    def get(self, ref: str) -> str:
        text = self._texts.get(ref)
        if text is not None:
            self._texts.move_to_end(ref)
            return text
        for backend in reversed(self._backends.values()):  # the latest attached first
            text = backend.read(ref)
            if text is not None:
                self.backend_reads += 1
                self._written[backend.name].add(ref)
                self._remember(ref, text)
                return text
        raise MissingContentError(
            missing_message(ref, [_place(b, ref) for b in reversed(self._backends.values())])
        )

    def ref_of(self, text: str) -> str | None:
        """The reference of `text` if this store handed it out or took it (no hashing)."""
        return self._known_ref(text)

    def resolve(self, value: str) -> str:
        """`value` itself, or the content it references."""
        return self.get(value) if is_ref(value) else value

    # -- bookkeeping -------------------------------------------------------------------------
    def _known_ref(self, text: str) -> str | None:
        ref = self._ref_by_id.get(id(text))
        if ref is not None and self._texts.get(ref) is text:
            return ref
        return None

    def _durable(self, ref: str) -> bool:
        return any(ref in refs for refs in self._written.values())

    def _remember(self, ref: str, text: str) -> None:
        if ref in self._texts:
            return
        self._texts[ref] = text
        self._ref_by_id[id(text)] = ref
        self._bytes += len(text)
        if not self._backends:
            self._pinned.add(ref)
        self._evict()

    def _evict(self) -> None:
        if self._bytes <= self.max_bytes:
            return
        for ref in list(self._texts):
            if self._bytes <= self.max_bytes:
                break
            if ref in self._pinned or not self._durable(ref):
                continue
            text = self._texts.pop(ref)
            self._ref_by_id.pop(id(text), None)
            self._bytes -= len(text)

    def clear(self) -> None:
        """Forget every text and what the backends were known to hold, as a fresh process
        would (pinned texts stay: memory is their only copy)."""
        for ref in [r for r in self._texts if r not in self._pinned]:
            text = self._texts.pop(ref)
            self._ref_by_id.pop(id(text), None)
            self._bytes -= len(text)
        for refs in self._written.values():
            refs.clear()
        for ensured in self._ensured_at.values():
            ensured.clear()

    @property
    def cached_bytes(self) -> int:
        return self._bytes


def _place(backend: ContentBackend, ref: str) -> str:
    """Where `backend` looked for `ref`, as an operator finds it (a file and its checkpoint)."""
    describe = getattr(backend, "describe", None)
    return str(describe(ref)) if describe is not None else f"not in {backend.name}"


# One per process: a Spark Python worker serves stage one and the step across micro-batches.
CONTENT = ContentStore()
