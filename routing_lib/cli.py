"""`routectl`: the front door (backfill, run, dump, route, clusters, serve, kafka, simulate...)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable

from routing_lib import clean_exit, lifeline
from routing_lib.config import Config, load_config

Handler = Callable[[argparse.Namespace, Config], int]
_COMMANDS: dict[str, Handler] = {}


class UsageError(Exception):
    """A user error: printed as one line on stderr, exit status 2."""


def command(name: str):
    def register(fn: Handler) -> Handler:
        _COMMANDS[name] = fn
        return fn

    return register


def _resolve(location: str) -> str:
    """A local folder (relative: from the project root), or s3a:// / s3:// as given
    (docs/object-storage.md)."""
    from routing_lib.storage import resolve  # delta-rs, pyarrow: not for every command

    return resolve(location)


def _warehouse(args: argparse.Namespace, config: Config) -> str:
    return _resolve(args.warehouse or config.paths.warehouse)


@command("schema")
def _schema(args: argparse.Namespace, config: Config) -> int:
    from schemas import event_json_schema

    print(json.dumps(event_json_schema(), indent=1))
    return 0


@command("backfill")
def _backfill(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.backfill import run_backfill

    try:
        run_backfill(
            config,
            args.input,
            _warehouse(args, config),
            as_of=args.as_of,
            checkpoint=args.checkpoint,
            max_files_per_trigger=args.max_files_per_trigger,
            allow_future_events=args.allow_future_events or None,
        )
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    return 0


@command("dump")
def _dump(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.core.dump import to_json
    from routing_lib.read.warehouse import load_snapshot

    print(to_json(load_snapshot(_warehouse(args, config)).dump()))
    return 0


def _route_index(args: argparse.Namespace, config: Config):
    from routing_lib.lookup.routes import RouteIndex
    from routing_lib.read.warehouse import load_snapshot

    return RouteIndex(
        load_snapshot(_warehouse(args, config)),
        support_acting_master=config.routes.support_acting_master,
        order_message_enable=config.routes.order_message_enable,
    )


@command("route")
def _route(args: argparse.Namespace, config: Config) -> int:
    route = _route_index(args, config).route(args.topic)
    if route is None:
        print(
            f"routectl route: TOPIC_NOT_EXIST (17): No topic route info in name server for "
            f"the topic: {args.topic}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(route, indent=1))
    return 0


@command("kv")
def _kv(args: argparse.Namespace, config: Config) -> int:
    """GET_KV_CONFIG / GET_KVLIST_BY_NAMESPACE from the warehouse (delta-rs, no JVM)."""
    from routing_lib.lookup.processor import no_kv_remark

    index = _route_index(args, config)
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


@command("clusters")
def _clusters(args: argparse.Namespace, config: Config) -> int:
    print(json.dumps(_route_index(args, config).cluster_info, indent=1))
    return 0


def _collector(args: argparse.Namespace, config: Config, port: int):
    """The collector of `collect` / `serve --collect`, publishing to [kafka] (or --kafka)."""
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
        admin_allow=config.collector.admin_allow,
    )


def _tls(args: argparse.Namespace, config: Config):
    """(remoting, HTTP) TLS of serve / collect: [tls] with the --tls-* flags over it."""
    from routing_lib.lookup.tls import listener_tls

    config = config.with_overrides(
        "tls", mode=args.tls_mode, cert_path=args.tls_cert, key_path=args.tls_key
    )
    return listener_tls(config.tls)


@command("serve")
def _serve(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.lookup.limits import Limits
    from routing_lib.lookup.server import serve

    port = args.port or config.serve.port
    tls, http_tls = _tls(args, config)
    serve(
        _warehouse(args, config),
        port,
        args.http_port or config.serve.http_port,
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


@command("collect")
def _collect(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.collector.server import collect
    from routing_lib.lookup.limits import Limits

    port = config.collector.port if args.port is None else args.port
    warehouse = args.warehouse or config.collector.warehouse
    tls, http_tls = _tls(args, config)
    collect(
        args.kafka or config.kafka.bootstrap_servers,
        args.topic or config.kafka.topic,
        port,
        Limits.from_config(config.serve),
        collector_id=args.collector_id or config.collector.collector_id or None,
        tick_interval_ms=config.collector.tick_interval_ms,
        publish_timeout_ms=config.collector.publish_timeout_ms,
        warehouse=_resolve(warehouse) if warehouse else None,
        admin_allow=config.collector.admin_allow,
        host=config.serve.host,
        http_port=config.collector.http_port or None,
        tls=tls,
        http_tls=http_tls,
    )
    return 0


@command("as-of")
def _as_of(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.read.history import as_of_dump

    print(json.dumps(as_of_dump(_warehouse(args, config), args.at), indent=1, sort_keys=True))
    return 0


@command("history")
def _history(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.read import history

    warehouse = _warehouse(args, config)
    if args.what == "admin":
        if args.name:
            raise UsageError("history admin takes no NAME (use --from/--to)")
        rows = history.admin_history(warehouse, getattr(args, "from"), args.to)
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
        plot_history(warehouse, args.out)
        print(f"wrote {args.out}")
        return 0
    if not args.name:
        raise UsageError(f"history {args.what} needs a NAME")
    if args.what == "topic":
        result: object = history.topic_history(warehouse, args.name, getattr(args, "from"), args.to)
    else:
        result = history.broker_history(warehouse, args.name)
    print(json.dumps(result, indent=1, default=str))
    return 0


@command("housekeeping")
def _housekeeping(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.housekeeping import run

    return run(args, config)


def _warehouse_table(name: str) -> str:
    """--table, checked when given (importing the table list costs delta-rs at every start)."""
    from routing_lib.housekeeping import WAREHOUSE_TABLES

    if name not in WAREHOUSE_TABLES:
        raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(WAREHOUSE_TABLES)}")
    return name


@command("demo")
def _demo(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.demo import run_demo

    return run_demo(config, args.brokers, args.topics, args.duration, args.work_dir)


@command("kafka")
def _kafka(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.kafka_local import run_kafka

    return run_kafka(args, config)


@command("simulate")
def _simulate(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.simulator.cli import run_simulate

    return run_simulate(args)


@command("produce")
def _produce(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.simulator.cli import run_produce

    return run_produce(args)


@command("job-path")
def _job_path(args: argparse.Namespace, config: Config) -> int:
    """The installed entry file of a job, for spark-submit (works from a wheel too)."""
    from routing_lib import jobs

    print(jobs.entry_file(args.job))
    return 0


@command("run")
def _run(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.stream_job import run_stream

    config = config.with_overrides(
        "kafka",
        bootstrap_servers=args.kafka,
        topic=args.topic,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        trigger_interval=args.trigger_interval,
    )
    config = config.with_overrides("paths", warehouse=args.warehouse, checkpoint=args.checkpoint)
    run_stream(config, available_now=args.available_now, metrics_port=args.metrics_port)
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML file overriding conf/routelake.toml")
    parser.add_argument("-v", "--verbose", action="store_true")


def _add_collector_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", help="bootstrap servers (default from conf [kafka])")
    parser.add_argument("--topic", help="Kafka topic of broker events (default from conf)")
    parser.add_argument("--collector-id", help="TICK source (default hostname:port)")


def _add_tls_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tls-mode",
        choices=["disabled", "permissive", "enforcing"],
        help="TLS of the listeners (default from conf [tls] mode; docs/tls.md)",
    )
    parser.add_argument("--tls-cert", help="PEM certificate chain (conf [tls] cert_path)")
    parser.add_argument("--tls-key", help="PEM private key (conf [tls] key_path)")


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
    p.add_argument(
        "--allow-future-events",
        action="store_true",
        help="keep lines dated more than [routes] max_future_skew_ms ahead of the wall clock "
        "(synthetic archives); default: dead-letter them",
    )
    _add_common(p)

    p = sub.add_parser("job-path", help="path of a job's entry file, for spark-submit")
    p.add_argument("job", choices=["route_state", "backfill"])
    _add_common(p)

    p = sub.add_parser("run", help="the streaming job: Kafka -> Delta route tables")
    p.add_argument("--kafka", help="bootstrap servers (default from conf)")
    p.add_argument("--topic", help="Kafka topic of broker events")
    p.add_argument("--warehouse")
    p.add_argument("--checkpoint")
    p.add_argument("--starting-offsets", help="earliest | latest | Spark JSON offsets")
    p.add_argument("--max-offsets-per-trigger", type=int)
    p.add_argument("--trigger-interval", help='e.g. "2 seconds"')
    p.add_argument(
        "--available-now", action="store_true", help="process what the topic holds now, then exit"
    )
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    _add_common(p)

    p = sub.add_parser("route", help="TopicRouteData of a topic, as the NameServer answers")
    p.add_argument("topic")
    p.add_argument("--warehouse")
    _add_common(p)

    p = sub.add_parser("kv", help="KV config (KVConfigManager) as the NameServer answers")
    p.add_argument("action", choices=["get", "list"])
    p.add_argument("namespace")
    p.add_argument("key", nargs="?", help="get: the key")
    p.add_argument("--warehouse")
    _add_common(p)

    p = sub.add_parser("clusters", help="ClusterInfo (brokerAddrTable + clusterAddrTable)")
    p.add_argument("--warehouse")
    _add_common(p)

    p = sub.add_parser("serve", help="lookup service: RocketMQ remoting protocol + HTTP")
    p.add_argument("--warehouse")
    p.add_argument("--port", type=int, help="remoting port (default 9876)")
    p.add_argument("--http-port", type=int, help="HTTP port (default 8080)")
    p.add_argument(
        "--workers",
        type=int,
        help="processes answering on the remoting port (default: the number of cores; "
        "always 1 with --collect)",
    )
    p.add_argument(
        "--collect",
        action="store_true",
        help="also take brokers' requests on the remoting port, publishing them "
        "to Kafka (a complete NameServer, with `routectl run`)",
    )
    _add_collector_args(p)
    _add_tls_args(p)
    _add_common(p)

    p = sub.add_parser("collect", help="collector: brokers' NameServer requests -> Kafka")
    p.add_argument("--port", type=int, help="remoting port (default 9877)")
    _add_collector_args(p)
    p.add_argument(
        "--warehouse",
        help="answer RegisterBrokerResult from this warehouse's "
        "snapshot (default: the collector's memory)",
    )
    _add_tls_args(p)
    _add_common(p)

    p = sub.add_parser("as-of", help="route tables at an event time, from the history tables")
    p.add_argument("--at", type=int, required=True, help="event time, epoch ms")
    p.add_argument("--warehouse")
    _add_common(p)

    p = sub.add_parser(
        "history", help="history of a topic or broker group, operators' changes (admin), or a plot"
    )
    p.add_argument("what", choices=["topic", "broker", "admin", "plot"])
    p.add_argument("name", nargs="?", help="topic or brokerName")
    p.add_argument("--from", type=int, help="event time, epoch ms (topic, admin)")
    p.add_argument("--to", type=int, help="event time, epoch ms (topic; admin: exclusive)")
    p.add_argument("--out", help="PNG file (plot)")
    p.add_argument("--warehouse")
    _add_common(p)

    p = sub.add_parser("demo", help="local Kafka + simulated fleet + job + lookup, live")
    p.add_argument("--brokers", type=int, default=6, help="broker groups to simulate")
    p.add_argument("--topics", type=int, default=10, help="topics per broker")
    p.add_argument("--duration", type=float, help="seconds (default: until Ctrl-C)")
    p.add_argument("--work-dir", help="logs and tables (default .work/demo; emptied first)")
    _add_common(p)

    p = sub.add_parser(
        "housekeeping", help="OPTIMIZE and VACUUM every warehouse table (docs/housekeeping.md)"
    )
    p.add_argument("--warehouse", help="default: [paths] warehouse of the config")
    p.add_argument(
        "--vacuum-hours", type=int, help="VACUUM retention in hours (default: a week, as Delta's)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="compact nothing; list the files VACUUM would delete"
    )
    p.add_argument(
        "--disable-retention-check",
        action="store_true",
        help="allow a --vacuum-hours below the default (like "
        "spark.databricks.delta.retentionDurationCheck.enabled=false)",
    )
    p.add_argument(
        "--lite",
        action="store_true",
        help="VACUUM only files the log marks as removed (keeps old _change_data/ and orphans)",
    )
    p.add_argument(
        "--since", metavar="YYYY-MM-DD", help="history tables: compact only event_date >= this day"
    )
    p.add_argument(
        "--before", metavar="YYYY-MM-DD", help="history tables: compact only event_date < this day"
    )
    p.add_argument(
        "--table",
        action="append",
        type=_warehouse_table,
        help="only this table (repeatable; default: all)",
    )
    _add_common(p)

    from routelake_dev.kafka_local import add_kafka_args
    from routelake_dev.simulator.cli import add_produce_args, add_simulate_args

    p = sub.add_parser("kafka", help="local Kafka broker (KRaft): start | stop | status | topic")
    add_kafka_args(p)
    _add_common(p)

    p = sub.add_parser("simulate", help="simulate a broker fleet into Kafka or archives")
    add_simulate_args(p)
    _add_common(p)

    p = sub.add_parser("produce", help="send archive files' lines to Kafka, in order")
    add_produce_args(p)
    _add_common(p)

    p = sub.add_parser("dump", help="canonical JSON dump of the route tables (no JVM)")
    p.add_argument("--warehouse")
    _add_common(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
        return _COMMANDS[args.command](args, config)
    except BrokenPipeError:  # `routectl dump | head`
        return 0
    except (UsageError, WarehouseError, ValueError, RuntimeError, OSError) as exc:
        print(f"routectl {args.command}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError | ValueError) else 1


def entry() -> None:
    """Console-script entry point: the interpreter shuts down as usual, after pyarrow's threads
    finished (clean_exit: also where no .pth file installed it, e.g. a wheel)."""
    clean_exit.install()
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `routectl dump | head`: nobody reads the rest, nor the exit flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)


if __name__ == "__main__":
    entry()
