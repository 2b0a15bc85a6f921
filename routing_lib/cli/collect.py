"""`routectl collect`: the collector alone, brokers' NameServer requests -> Kafka."""

from __future__ import annotations

import argparse

from routing_lib.cli.common import resolve
from routing_lib.cli.listeners import add_collector_args, add_tls_args, listener_tls
from routing_lib.config import Config

HELP = "collector: brokers' NameServer requests -> Kafka"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="remoting port (default 9877)")
    add_collector_args(parser)
    parser.add_argument(
        "--warehouse",
        help="answer RegisterBrokerResult from this warehouse's "
        "snapshot (default: the collector's memory)",
    )
    add_tls_args(parser)


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.collector.server import collect
    from routing_lib.remoting.limits import Limits

    port = config.collector.port if args.port is None else args.port
    warehouse = args.warehouse or config.collector.warehouse
    tls, http_tls = listener_tls(args, config)
    collect(
        args.kafka or config.kafka.bootstrap_servers,
        args.topic or config.kafka.topic,
        port,
        Limits.from_config(config.serve),
        collector_id=args.collector_id or config.collector.collector_id or None,
        tick_interval_ms=config.collector.tick_interval_ms,
        publish_timeout_ms=config.collector.publish_timeout_ms,
        watermark_delay_ms=config.routes.watermark_delay_ms,
        warehouse=resolve(warehouse) if warehouse else None,
        admin_allow=config.collector.admin_allow,
        host=config.serve.host,
        http_port=config.collector.http_port or None,
        tls=tls,
        http_tls=http_tls,
    )
    return 0
