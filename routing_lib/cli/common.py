"""What several subcommands share: the user-error type, the common flags, the warehouse."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from routing_lib.config import Config

if TYPE_CHECKING:
    from routing_lib.lookup.routes import RouteIndex


class UsageError(Exception):
    """A user error: printed as one line on stderr, exit status 2."""


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML file overriding conf/routelake.toml")
    parser.add_argument("-v", "--verbose", action="store_true")


def resolve(location: str) -> str:
    """A local folder (relative: from the project root), or s3a:// / s3:// as given
    (docs/object-storage.md)."""
    from routing_lib.storage import resolve  # delta-rs, pyarrow: not for every command

    return resolve(location)


def warehouse(args: argparse.Namespace, config: Config) -> str:
    """--warehouse, else [paths] warehouse of the config."""
    return resolve(args.warehouse or config.paths.warehouse)


def route_index(args: argparse.Namespace, config: Config) -> RouteIndex:
    """The lookup service's view of the warehouse (route, kv, clusters; delta-rs, no JVM)."""
    from routing_lib.lookup.routes import RouteIndex
    from routing_lib.read.warehouse import load_snapshot

    return RouteIndex(
        load_snapshot(warehouse(args, config)),
        support_acting_master=config.routes.support_acting_master,
        order_message_enable=config.routes.order_message_enable,
    )
