"""`routectl clusters`: ClusterInfo (brokerAddrTable + clusterAddrTable) from the warehouse."""

from __future__ import annotations

import argparse
import json

from routing_lib.cli.common import route_index
from routing_lib.config import Config

HELP = "ClusterInfo (brokerAddrTable + clusterAddrTable)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse")


def handle(args: argparse.Namespace, config: Config) -> int:
    print(json.dumps(route_index(args, config).cluster_info, indent=1))
    return 0
