"""Run one fuzz target under atheris (libFuzzer): `python -m tests.fuzz.run TARGET [options]`.

Options are libFuzzer's (`-runs=N`, `-max_total_time=S`, corpus folders, ...). Set here unless
given: -timeout=10 (an input running 10 s is a hang), -rss_limit_mb=2048 (allocation bound),
and, when no folder is given, .work/fuzz/TARGET (new inputs are written there) plus the
seed corpus tests/fuzz/corpus/TARGET (read only). Only routing_lib and schemas are
instrumented: coverage feedback comes from them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

CORPUS = Path(__file__).resolve().parent / "corpus"
WORK = Path(__file__).resolve().parents[2] / ".work" / "fuzz"


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(f"usage: {argv[0]} TARGET [libFuzzer options]")
    name, options = argv[1], argv[2:]
    with atheris.instrument_imports(include=["routing_lib", "schemas"]):
        from tests.fuzz.targets import TARGETS
    if name not in TARGETS:
        raise SystemExit(f"unknown target {name!r}; targets: {', '.join(TARGETS)}")
    defaults = ["-timeout=10", "-rss_limit_mb=2048"]
    given = {option.split("=")[0] for option in options if option.startswith("-")}
    options = [d for d in defaults if d.split("=")[0] not in given] + options
    if not any(not option.startswith("-") for option in options):
        (WORK / name).mkdir(parents=True, exist_ok=True)
        options += [str(WORK / name), str(CORPUS / name)]
    atheris.Setup([argv[0], *options], TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
