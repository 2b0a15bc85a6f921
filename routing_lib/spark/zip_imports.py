"""Keep PySpark's per-task `importlib.invalidate_caches()` from re-reading zip archives.

Python 3.11's zipimporter re-reads its whole archive directory on every
`invalidate_caches()` (3.12 made it lazy). A PySpark worker calls that at the start of every
task, and its path holds pyspark.zip, py4j's zip and spark-core's jar, with one zipimporter
per package imported from them: ~80 ms of CPU per task, a third of a small micro-batch.
Installed, an archive is re-read only when its size or modification time changed,
so a changed archive is still picked up. One read serves every importer of the archive: a
worker's first tasks import packages from pyspark.zip and the spark-core jar, each package a
new importer, and each importer re-read the whole archive on its first call (the backfill of
60 x 8 000: ~1 CPU-s per worker process, 2 per run).
"""

from __future__ import annotations

import os
import sys
import zipimport

_MARK = "_routelake_reads_when_changed"
# archive -> its stamp when this process last read its directory (into zipimport's cache)
_read_at: dict[str, tuple[int, int]] = {}


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        status = os.stat(archive)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def install() -> None:
    """Patch zipimporter.invalidate_caches in this process (idempotent; a no-op on 3.12+)."""
    importer = zipimport.zipimporter
    if sys.version_info >= (3, 12) or getattr(importer.invalidate_caches, _MARK, False):
        return
    reread = importer.invalidate_caches

    def invalidate_when_changed(self: zipimport.zipimporter) -> None:
        stamp = _stamp(self.archive)
        if stamp is not None and getattr(self, "_routelake_stamp", None) == stamp:
            return
        shared = zipimport._zip_directory_cache.get(self.archive)  # type: ignore[attr-defined]
        if stamp is not None and shared is not None and _read_at.get(self.archive) == stamp:
            self._files = shared  # type: ignore[attr-defined]  # what a re-read would find
        else:
            reread(self)
            if stamp is not None:
                _read_at[self.archive] = stamp
        self._routelake_stamp = stamp  # type: ignore[attr-defined]

    setattr(invalidate_when_changed, _MARK, True)
    importer.invalidate_caches = invalidate_when_changed  # type: ignore[method-assign]
