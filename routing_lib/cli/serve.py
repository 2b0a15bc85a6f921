"""`routectl serve`: the lookup service (RocketMQ remoting protocol + HTTP), optionally also
the collector on the same port (`--collect`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from routing_lib.cli.common import warehouse
from routing_lib.cli.listeners import add_collector_args, add_tls_args, listener_tls
from routing_lib.config import Config

if TYPE_CHECKING:  # at run time imported only when --collect asks for a collector
    from routing_lib.collector.service import Collector

HELP = "lookup service: RocketMQ remoting protocol + HTTP"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse")
    parser.add_argument("--port", type=int, help="remoting port (default 9876)")
    parser.add_argument("--http-port", type=int, help="HTTP port (default 8080)")
    parser.add_argument(
        "--workers",
        type=int,
        help="processes answering on the remoting port (default: the number of cores; "
        "always 1 with --collect)",
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="also take brokers' requests on the remoting port, publishing them "
        "to Kafka (a complete NameServer, with `routectl run`)",
    )
    add_collector_args(parser)
    add_tls_args(parser)


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.lookup.allocator import with_jemalloc_conf
    from routing_lib.lookup.server import console_url, serve
    from routing_lib.remoting.limits import Limits

    port = args.port or config.serve.port
    http_port = args.http_port or config.serve.http_port
    tls, http_tls = listener_tls(args, config)
    with_jemalloc_conf()  # the arguments are valid: start again with deltalake's allocator set
    # Printed whatever the log level: a newcomer learns where the console is.
    print(
        f"route console: {console_url(config.serve.host, http_port, http_tls.enabled)}",
        file=sys.stderr,
        flush=True,
    )
    serve(
        warehouse(args, config),
        port,
        http_port,
        config.serve.poll_interval_s,
        config.serve.max_frame_bytes,
        config.routes.support_acting_master,
        host=config.serve.host,
        limits=Limits.from_config(config.serve),
        collector=_collector(args, config, port) if args.collect else None,
        max_watermark_age_s=config.serve.max_watermark_age_s,
        order_message_enable=config.routes.order_message_enable,
        tls=tls,
        http_tls=http_tls,
        workers=args.workers or os.cpu_count() or 1,
    )
    return 0


def _collector(args: argparse.Namespace, config: Config, port: int) -> Collector:
    """The collector of `serve --collect`, publishing to [kafka] (or --kafka)."""
    from routing_lib.collector.publisher import KafkaPublisher
    from routing_lib.collector.server import default_collector_id
    from routing_lib.collector.service import Collector

    publisher = KafkaPublisher(
        args.kafka or config.kafka.bootstrap_servers,
        args.topic or config.kafka.topic,
        delivery_timeout_ms=config.collector.publish_timeout_ms,
    )
    collector_id = args.collector_id or config.collector.collector_id or default_collector_id(port)
    return Collector(
        publisher,
        collector_id=collector_id,
        tick_interval_ms=config.collector.tick_interval_ms,
        watermark_delay_ms=config.routes.watermark_delay_ms,
        admin_allow=config.collector.admin_allow,
    )
