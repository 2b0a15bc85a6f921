"""`routectl`: the front door (backfill, run, dump, route, clusters, serve, kafka, simulate...)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Protocol

from routing_lib import clean_exit, lifeline
from routing_lib.cli import (
    as_of,
    backfill,
    clusters,
    collect,
    demo,
    dump,
    history,
    housekeeping,
    job_path,
    kafka,
    kv,
    migrate,
    produce,
    route,
    run,
    schema,
    serve,
    simulate,
)
from routing_lib.cli.common import UsageError, add_common
from routing_lib.config import Config, load_config
from routing_lib.jobs import COMMAND
from routing_lib.storage import is_remote


class Subcommand(Protocol):
    """A module of this package: its flags beside the code that acts on them."""

    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def handle(self, args: argparse.Namespace, config: Config) -> int: ...


# In the order `routectl --help` lists them.
COMMANDS: dict[str, Subcommand] = {
    "schema": schema,
    "backfill": backfill,
    "job-path": job_path,
    "run": run,
    "route": route,
    "kv": kv,
    "clusters": clusters,
    "serve": serve,
    "collect": collect,
    "as-of": as_of,
    "history": history,
    "demo": demo,
    "housekeeping": housekeeping,
    "migrate": migrate,
    "kafka": kafka,
    "simulate": simulate,
    "produce": produce,
    "dump": dump,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routectl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        subparser = sub.add_parser(name, help=command.HELP)
        command.add_arguments(subparser)
        add_common(subparser)
    return parser


# Folders named on the command line: relative ones are from the current directory, as a shell
# user expects. Relative paths in a config file stay relative to the project (config.base_dir).
_PATH_OPTIONS = ("warehouse", "checkpoint", "work_dir")


def _paths_from_cwd(args: argparse.Namespace) -> None:
    for name in _PATH_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value and not is_remote(value):
            setattr(args, name, os.path.abspath(value))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _paths_from_cwd(args)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose:
        logging.getLogger("routelake").setLevel(logging.INFO)
    lifeline.hangup_as_terminate()  # a closed terminal stops every command as SIGTERM does
    from routing_lib.read.warehouse import WarehouseError

    try:
        config = load_config(args.config)
        return COMMANDS[args.command].handle(args, config)
    except BrokenPipeError:  # `routectl dump | head`
        return 0
    except (UsageError, WarehouseError, ValueError, RuntimeError, OSError) as exc:
        print(f"routectl {args.command}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError | ValueError) else 1


def entry(argv: list[str] | None = None) -> None:
    """Console-script entry point: the interpreter shuts down as usual, after pyarrow's threads
    finished (clean_exit: also where no .pth file installed it, e.g. a wheel)."""
    clean_exit.install()
    code = main(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `routectl dump | head`: nobody reads the rest, nor the exit flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)


def run_job(job: str) -> None:
    """A job's spark-submit entry file (jobs/*.py, routing_lib/jobs/submit/*.py): its arguments
    are those of the job's routectl subcommand, so both run one code path."""
    entry([COMMAND[job], *sys.argv[1:]])
