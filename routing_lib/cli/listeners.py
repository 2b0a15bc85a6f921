"""Flags and settings that `serve` and `collect` share: the collector's Kafka and id, TLS."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from routing_lib.config import Config

if TYPE_CHECKING:
    from routing_lib.remoting.tls import ListenerTls


def add_collector_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", help="bootstrap servers (default from conf [kafka])")
    parser.add_argument("--topic", help="Kafka topic of broker events (default from conf)")
    parser.add_argument("--collector-id", help="TICK source (default hostname:port)")


def add_tls_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tls-mode",
        choices=["disabled", "permissive", "enforcing"],
        help="TLS of the listeners (default from conf [tls] mode; docs/tls.md)",
    )
    parser.add_argument("--tls-cert", help="PEM certificate chain (conf [tls] cert_path)")
    parser.add_argument("--tls-key", help="PEM private key (conf [tls] key_path)")


def listener_tls(args: argparse.Namespace, config: Config) -> tuple[ListenerTls, ListenerTls]:
    """(remoting, HTTP) TLS of serve / collect: [tls] with the --tls-* flags over it."""
    from routing_lib.remoting.tls import listener_tls

    config = config.with_overrides(
        "tls", mode=args.tls_mode, cert_path=args.tls_cert, key_path=args.tls_key
    )
    return listener_tls(config.tls)
