"""The zip-import fix (routing_lib/spark/zip_imports.py): PySpark's per-task
importlib.invalidate_caches() no longer re-reads unchanged zip archives, and still sees a
changed one."""

import importlib
import sys
import zipfile
import zipimport

import pytest

from routing_lib.spark import zip_imports


@pytest.fixture
def archive_on_path(tmp_path, monkeypatch):
    archive = tmp_path / "modules.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipfix_first.py", "VALUE = 1\n")
    monkeypatch.syspath_prepend(str(archive))
    reads: list[str] = []
    read_directory = zipimport._read_directory

    def counting_read(path):
        reads.append(path)
        return read_directory(path)

    monkeypatch.setattr(zipimport, "_read_directory", counting_read)
    yield archive, reads
    for name in ("zipfix_first", "zipfix_second"):
        sys.modules.pop(name, None)
    sys.path_importer_cache.pop(str(archive), None)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ re-reads lazily by itself")
def test_unchanged_archive_is_not_read_again(archive_on_path):
    archive, reads = archive_on_path
    zip_imports.install()
    assert importlib.import_module("zipfix_first").VALUE == 1
    importlib.invalidate_caches()  # the first call stamps the archive
    reads.clear()
    for _ in range(3):
        importlib.invalidate_caches()
    assert [r for r in reads if r == str(archive)] == []


def test_changed_archive_is_read_again(archive_on_path):
    archive, _ = archive_on_path
    zip_imports.install()
    assert importlib.import_module("zipfix_first").VALUE == 1
    importlib.invalidate_caches()
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("zipfix_second.py", "VALUE = 2\n")
    importlib.invalidate_caches()
    assert importlib.import_module("zipfix_second").VALUE == 2


def test_install_is_idempotent():
    zip_imports.install()
    patched = zipimport.zipimporter.invalidate_caches
    zip_imports.install()
    assert zipimport.zipimporter.invalidate_caches is patched


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ re-reads lazily by itself")
def test_one_read_serves_every_importer_of_an_archive(archive_on_path):
    archive, reads = archive_on_path
    zip_imports.install()
    assert importlib.import_module("zipfix_first").VALUE == 1
    importlib.invalidate_caches()  # reads the archive once, for its importer on sys.path
    reads.clear()
    # a package's importer (as an import from the archive creates): its first call takes the
    # directory read above instead of reading the archive again
    other = zipimport.zipimporter(str(archive / "pkg"))
    other.invalidate_caches()
    assert reads == []
    with zipfile.ZipFile(archive, "a") as zf:  # changed: read again, once
        zf.writestr("zipfix_second.py", "VALUE = 2\n")
    other.invalidate_caches()
    sys.path_importer_cache[str(archive)].invalidate_caches()
    assert reads == [str(archive)]
    assert "zipfix_second.py" in other._files
