"""`routectl kv get|list`: GET_KV_CONFIG / GET_KVLIST_BY_NAMESPACE from the warehouse
(delta-rs, no JVM)."""

from __future__ import annotations

import argparse
import json
import sys

from routing_lib.cli.common import UsageError, route_index
from routing_lib.config import Config

HELP = "KV config (KVConfigManager) as the NameServer answers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["get", "list"])
    parser.add_argument("namespace")
    parser.add_argument("key", nargs="?", help="get: the key")
    parser.add_argument("--warehouse")


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.lookup.processor import no_kv_remark

    index = route_index(args, config)
    if args.action == "get":
        if args.key is None:
            raise UsageError("kv get needs NAMESPACE KEY")
        value = index.kv_value(args.namespace, args.key)
        if value is None:
            print(
                f"routectl kv: QUERY_NOT_FOUND (22): {no_kv_remark(args.namespace, args.key)}",
                file=sys.stderr,
            )
            return 1
        print(value)
        return 0
    if args.key is not None:
        raise UsageError("kv list takes NAMESPACE only")
    table = index.kv.get(args.namespace)
    if table is None:
        print(f"routectl kv: QUERY_NOT_FOUND (22): {no_kv_remark(args.namespace)}", file=sys.stderr)
        return 1
    print(json.dumps({"table": dict(table)}, indent=1, ensure_ascii=False))
    return 0
