"""Zip routelake's Python packages for `spark-submit --py-files` (docs/spark-cluster.md).

    .venv/bin/python deploy/pyfiles.py [--out DIR]      # prints the zip's path

Spark puts a `--py-files` .zip on the executors' sys.path (a .whl is not: pyspark adds only
.zip/.egg/.jar files), so the executors import routing_lib and schemas from this file, not from
a project folder. Package data (routing_lib/defaults/*.toml) is included; bytecode is not.
"""

from __future__ import annotations

import argparse
import re
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("routing_lib", "schemas")


def version() -> str:
    text = (ROOT / "routing_lib" / "__init__.py").read_text()
    match = re.search(r'__version__ = "([^"]+)"', text)
    if not match:
        raise RuntimeError("routing_lib/__init__.py has no __version__")
    return match.group(1)


def build(out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"routelake-{version()}.zip"
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            for path in sorted((ROOT / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    zf.write(path, path.relative_to(ROOT).as_posix())
    tmp.replace(target)  # a reader never sees half a zip
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "dist"), help="folder (default: dist/)")
    print(build(Path(parser.parse_args().out)))


if __name__ == "__main__":
    main()
