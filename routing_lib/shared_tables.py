"""Topic tables validated by another process: an index in the content folder, from the hash of
a table's bytes to its content reference (routing_lib/known_tables.py).

Stage one's Python workers each keep their own KnownTables, and an archive's files each hold
lines of every broker, so both workers of a 2-core backfill validated every table (60 x 8 000:
~64 tables, ~15 ms each of validation, packing and chunking, twice). Now the worker that
validates a table publishes `<content>/tables/<key>` holding its reference, once the content is
durable; the other reads it on its own miss and takes the reference, after making its content
durable itself (ContentStore.ensure reads and touches every chunk, as for any reference that
leaves a process), instead of validating the bytes again.

Why this cannot change a verdict or a payload:
- an entry is written only after the table's bytes validated and its packed form was stored
  under the reference: the reference names exactly the packed text that process made, and
  any process makes the same packed text from the same bytes with the same code. The key
  hashes the bytes (BLAKE2b, 128 bits, as KnownTables does within a process) together with a
  fingerprint of the table's schema and of the packed form, so another version of the code
  never takes a reference made by this one;
- an entry that cannot be read, is not a reference, or names content that is gone or corrupt
  is a miss: the table is validated here, as before;
- the payload a process then emits is the one it would have emitted after its own validation
  (the registration's head, then the reference: routing_lib/core/wire.py `externalize`).

Entries are files named by a 32-digit hex digest in a folder of the content folder, so the
content collector (routing_lib/content_gc.py) deletes them like unreferenced content once
they are older than its grace period; a deleted entry is a miss.

Local content folders only: on object storage, taking a table would read its manifest and
every chunk back (a GET each, one after the other: ~80 for 10 000 topics), far longer than
validating the bytes in hand.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from routing_lib import storage
from routing_lib.content_files import TEMPORARY_PREFIX, ContentSettings
from routing_lib.core.content import CONTENT, CONTENT_FAILURES, is_ref
from routing_lib.known_tables import TABLE_FORMAT

log = logging.getLogger("routelake.shared_tables")

INDEX_FOLDER = "tables"


class SharedTableIndex:
    """The index of one content folder, as KnownTables' TableIndex."""

    def __init__(self, store: ContentSettings):
        self.store = store
        self.location = storage.join(store.location, INDEX_FOLDER)
        self.published = 0

    def entry(self, key: bytes) -> str:
        name = hashlib.blake2b(TABLE_FORMAT + key, digest_size=16).hexdigest()
        return storage.join(self.location, name)

    def adopt(self, key: bytes) -> str | None:
        try:
            ref = storage.read_text(self.entry(key))
        except (OSError, UnicodeDecodeError):  # none (the common case), or unreadable
            return None
        if not is_ref(ref):
            return None
        try:
            # read here (its digests checked: content that is gone or corrupt is a miss, even
            # inside deferred writes, where `ensure` only queues), then made durable for this
            # process as for any reference it lets out (its files touched)
            backend = CONTENT.attach(self.store.backend())
            CONTENT.get(ref)
            CONTENT.ensure(ref, backend)
        except CONTENT_FAILURES:
            return None
        return ref

    def publish(self, key: bytes, ref: str) -> None:
        """Name `ref` (durable already) as the packed form of the table hashed to `key`. Best
        effort: an entry that is not written is another process's miss."""
        path = self.entry(key)
        try:
            _write_atomically(Path(path), ref.encode())
        except OSError as exc:
            log.debug("table index entry %s not written: %r", path, exc)
            return
        self.published += 1


def _write_atomically(path: Path, data: bytes) -> None:
    """A new name for whole bytes (no fsync: an entry lost in a crash is a miss)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=TEMPORARY_PREFIX)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


_INDEXES: dict[ContentSettings, SharedTableIndex] = {}


def table_index(store: ContentSettings) -> SharedTableIndex | None:
    """The process's index of a local content folder (one per settings); None on object
    storage (module docstring)."""
    if storage.is_remote(store.location):
        return None
    index = _INDEXES.get(store)
    if index is None:
        index = _INDEXES[store] = SharedTableIndex(store)
    return index
