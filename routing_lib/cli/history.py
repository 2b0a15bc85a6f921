"""`routectl history topic|broker|admin|plot`: what the history tables tell."""

from __future__ import annotations

import argparse
import json

from routing_lib.cli.common import UsageError, warehouse
from routing_lib.config import Config

HELP = "history of a topic or broker group, operators' changes (admin), or a plot"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["topic", "broker", "admin", "plot"])
    parser.add_argument("name", nargs="?", help="topic or brokerName")
    parser.add_argument("--from", type=int, help="event time, epoch ms (topic, admin)")
    parser.add_argument("--to", type=int, help="event time, epoch ms (topic; admin: exclusive)")
    parser.add_argument("--out", help="PNG file (plot)")
    parser.add_argument("--warehouse")


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.read import history

    location = warehouse(args, config)
    if args.what == "admin":
        if args.name:
            raise UsageError("history admin takes no NAME (use --from/--to)")
        rows = history.admin_history(location, getattr(args, "from"), args.to)
        print(json.dumps(rows, indent=1, default=str, ensure_ascii=False))
        return 0
    if args.what == "plot":
        try:
            from routing_lib.history_plot import plot_history
        except ModuleNotFoundError as exc:  # an extra: pip install 'routelake[plot]'
            raise UsageError(
                f"history plot needs {exc.name}: pip install 'routelake[plot]'"
            ) from None

        if not args.out:
            raise UsageError("history plot needs --out FILE.png")
        plot_history(location, args.out)
        print(f"wrote {args.out}")
        return 0
    if not args.name:
        raise UsageError(f"history {args.what} needs a NAME")
    if args.what == "topic":
        result: object = history.topic_history(location, args.name, getattr(args, "from"), args.to)
    else:
        result = history.broker_history(location, args.name)
    print(json.dumps(result, indent=1, default=str))
    return 0
