"""The content store's durable backend: one file per reference under the job's checkpoint.

`<checkpoint>/content/<first two digest digits>/<digest>`, written once (a temporary file
renamed into place locally; one PUT on object storage, which is atomic) and never changed, so
concurrent or retried writers of one reference are harmless: they write the same bytes.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs as pafs

from routing_lib import storage
from routing_lib.core.content import CONTENT, ContentBackend

CONTENT_FOLDER = "content"


@dataclass(frozen=True)
class ContentSettings:
    """Where a query's content lives and from which size a value goes there."""

    location: str  # the folder (local path or s3:// URI)
    min_chars: int  # values shorter than this stay inline

    def backend(self) -> ContentBackend:
        return CONTENT.attach(ContentFolder(self.location))


def content_settings(checkpoint: str, min_chars: int) -> ContentSettings:
    return ContentSettings(storage.join(checkpoint, CONTENT_FOLDER), min_chars)


class ContentFolder:
    def __init__(self, location: str):
        self.name = location
        self._remote = storage.is_remote(location)

    def _path(self, ref: str) -> str:
        digest = ref[1:]
        return storage.join(self.name, digest[:2], digest)

    def read(self, ref: str) -> str | None:
        path = self._path(ref)
        try:
            if self._remote:
                return storage.read_text(path)
            return Path(path).read_bytes().decode("utf-8", "surrogatepass")
        except FileNotFoundError:
            return None

    def write(self, ref: str, text: str) -> None:
        path = self._path(ref)
        data = text.encode("utf-8", "surrogatepass")
        if self._remote:
            filesystem, key = storage.filesystem(path)
            if filesystem.get_file_info(key).type == pafs.FileType.NotFound:
                with filesystem.open_output_stream(key) as stream:
                    stream.write(data)
            return
        target = Path(path)
        if target.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
