"""`routectl`: the front door (backfill, run, dump, route, clusters, serve, kafka, simulate...)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable

from routing_lib.config import Config, load_config, project_path

Handler = Callable[[argparse.Namespace, Config], int]
_COMMANDS: dict[str, Handler] = {}


class UsageError(Exception):
    """A user error: printed as one line on stderr, exit status 2."""


def command(name: str):
    def register(fn: Handler) -> Handler:
        _COMMANDS[name] = fn
        return fn
    return register


def _warehouse(args: argparse.Namespace, config: Config) -> str:
    return str(project_path(args.warehouse or config.paths.warehouse))


@command("schema")
def _schema(args: argparse.Namespace, config: Config) -> int:
    from schemas import event_json_schema

    print(json.dumps(event_json_schema(), indent=1))
    return 0


@command("backfill")
def _backfill(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.backfill import run_backfill

    try:
        run_backfill(config, args.input, _warehouse(args, config), as_of=args.as_of,
                     checkpoint=args.checkpoint, max_files_per_trigger=args.max_files_per_trigger)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    return 0


@command("dump")
def _dump(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.core.dump import to_json
    from routing_lib.read.warehouse import load_snapshot

    print(to_json(load_snapshot(_warehouse(args, config)).dump()))
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML file overriding conf/routelake.toml")
    parser.add_argument("-v", "--verbose", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routectl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("schema", help="print the event JSON Schema")
    _add_common(p)

    p = sub.add_parser("backfill", help="archived .jsonl/.jsonl.gz events -> Delta route tables")
    p.add_argument("--input", nargs="+", required=True, help="files or folders")
    p.add_argument("--warehouse", help="Delta warehouse folder")
    p.add_argument("--as-of", type=int, help="event time (epoch ms): publish State(AS_OF)")
    p.add_argument("--checkpoint", help="default: WAREHOUSE/_checkpoints/backfill")
    p.add_argument("--max-files-per-trigger", type=int, help="files per micro-batch")
    _add_common(p)

    p = sub.add_parser("dump", help="canonical JSON dump of the route tables (no JVM)")
    p.add_argument("--warehouse")
    _add_common(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verbose:
        logging.getLogger("routelake").setLevel(logging.INFO)
    from routing_lib.read.warehouse import WarehouseError

    try:
        config = load_config(args.config)
        return _COMMANDS[args.command](args, config)
    except (UsageError, WarehouseError, ValueError) as exc:
        print(f"routectl {args.command}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError | ValueError) else 1


if __name__ == "__main__":
    sys.exit(main())
