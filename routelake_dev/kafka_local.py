"""A single-node Apache Kafka broker (KRaft, combined broker+controller) for local runs and tests.

The broker runs from the jars in `.jars/kafka/` (deploy/maven profile `kafka`) as
`java -cp '.jars/kafka/*' kafka.Kafka server.properties`, detached in its own session so it
outlives the caller. Everything it writes lives under the config's `kafka.data_dir`:

    server.properties, log4j.properties   written on every start from the config
    cluster.id                            the KRaft cluster id (generated once)
    data/                                 log.dirs (topics + the __cluster_metadata log)
    logs/server.log, logs/kafka.out       broker log, JVM stdout/stderr
    kafka.pid                             pid of the running broker

It listens on loopback only: the client listener on the port of `kafka.bootstrap_servers`,
the controller listener on the next port (or `--controller-port`).

    routectl kafka start [--topic T] [--partitions N] [--no-topic]   (or scripts/kafka.sh start)
    routectl kafka stop | status
    routectl kafka topic [--topic T] [--partitions N]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from routing_lib import lifeline
from routing_lib.collector.publisher import MAX_MESSAGE_BYTES
from routing_lib.config import Config, KafkaConfig, load_config, project_path

SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024  # must stay above MAX_MESSAGE_BYTES
NODE_ID = 1
JARS_DIR = ".jars/kafka"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
DEFAULT_PARTITIONS = 1  # one partition: the job reads events in the order they were produced
# Marks the broker's JVM command line so a recycled pid is never mistaken for it.
MARKER_PROPERTY = "routelake.kafka.dir"


@dataclass(frozen=True)
class BrokerPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def properties(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j.properties"

    @property
    def cluster_id(self) -> Path:
        return self.root / "cluster.id"

    @property
    def pid_file(self) -> Path:
        return self.root / "kafka.pid"

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    @property
    def out_file(self) -> Path:
        return self.logs / "kafka.out"

    @property
    def server_log(self) -> Path:
        return self.logs / "server.log"


@dataclass(frozen=True)
class KafkaStatus:
    running: bool  # our broker process (from the pid file) is alive
    pid: int | None
    bootstrap: str
    reachable: bool  # something answers Kafka metadata requests on the bootstrap address
    data_dir: str

    def describe(self) -> str:
        if self.running:
            state = f"running (pid {self.pid})" + ("" if self.reachable else ", not answering yet")
        elif self.reachable:
            state = "not started by us, but a Kafka broker answers there"
        else:
            state = "not running"
        return f"kafka {self.bootstrap}: {state}; data dir {self.data_dir}"


@dataclass(frozen=True)
class StartResult:
    started: bool  # False: a broker was already running (ours, or another one on that port)
    pid: int | None
    seconds: float  # how long start() took


def broker_paths(config: KafkaConfig) -> BrokerPaths:
    return BrokerPaths(project_path(config.data_dir))


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """(host, port) of a single loopback `host:port` (the only kind this module will serve)."""
    if "," in bootstrap:
        raise ValueError(f"expected one host:port, got {bootstrap!r}")
    host, sep, port = bootstrap.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected host:port, got {bootstrap!r}")
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"the local broker only listens on loopback, not on {host!r}")
    return ("127.0.0.1" if host == "localhost" else host.strip("[]")), int(port)


def _listener_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("java not found (need Java 17 on PATH or JAVA_HOME)")
    return found


def _classpath() -> str:
    jars = project_path(JARS_DIR)
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise RuntimeError(f"no Kafka jars in {jars}: fetch them with deploy/maven (profile kafka)")
    return str(jars / "*")


def _new_cluster_id() -> str:
    """A Kafka Uuid string: 16 random bytes, URL-safe base64 without padding, not starting '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(paths: BrokerPaths, host: str, port: int, controller_port: int) -> str:
    lh = _listener_host(host)
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{lh}:{controller_port}",
        "listeners": f"PLAINTEXT://{lh}:{port},CONTROLLER://{lh}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{lh}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(paths.data),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "message.max.bytes": str(MAX_MESSAGE_BYTES),
        "replica.fetch.max.bytes": str(MAX_MESSAGE_BYTES),
        "replica.fetch.response.max.bytes": str(MAX_MESSAGE_BYTES),
        "fetch.max.bytes": str(MAX_MESSAGE_BYTES),
        "socket.request.max.bytes": str(SOCKET_REQUEST_MAX_BYTES),
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.retention.hours": "168",
    }
    header = "# written by routelake_dev.kafka_local on every start; edits are overwritten\n"
    return header + "".join(f"{k}={v}\n" for k, v in lines.items())


LOG4J_PROPERTIES = """\
# written by routelake_dev.kafka_local
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.MaxFileSize=50MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.org.apache.kafka.raft=WARN
"""


def _jvm_args(paths: BrokerPaths, heap: str) -> list[str]:
    return [
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{paths.log4j}",
        f"-Dkafka.logs.dir={paths.logs}",
        f"-D{MARKER_PROPERTY}={paths.root}",
    ]


def _read_pid(paths: BrokerPaths) -> int | None:
    try:
        return int(paths.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _is_our_broker(pid: int, paths: BrokerPaths) -> bool:
    """Alive, not a zombie, and its command line carries our marker for this data dir."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
        if done == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return False
    return f"-D{MARKER_PROPERTY}={paths.root}".encode() in cmdline


def _running_pid(paths: BrokerPaths) -> int | None:
    pid = _read_pid(paths)
    return pid if pid is not None and _is_our_broker(pid, paths) else None


@contextlib.contextmanager
def _locked(paths: BrokerPaths) -> Iterator[None]:
    """Serialises start/stop of one data dir across processes (e.g. parallel test sessions)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def metadata_ready(bootstrap: str, timeout_s: float = 5.0) -> bool:
    """True when kafka-python can fetch cluster metadata listing at least one live broker."""
    from kafka import KafkaAdminClient

    timeout_ms = max(1000, int(timeout_s * 1000))
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="routelake-ready",
            request_timeout_ms=timeout_ms,
            bootstrap_timeout_ms=timeout_ms,
            reconnect_backoff_max_ms=1000,
        )
    except Exception:  # any failure means "not ready yet"
        return False
    try:
        return bool(admin.describe_cluster().get("brokers"))
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            admin.close()


def wait_ready(
    bootstrap: str,
    timeout_s: float,
    alive: Callable[[], bool] | None = None,
    paths: BrokerPaths | None = None,
) -> None:
    """Poll until metadata can be fetched; fail early once `alive()` says the broker died."""
    host, port = parse_bootstrap(bootstrap)
    deadline = time.monotonic() + timeout_s
    while True:
        if alive is not None and not alive():
            raise RuntimeError(
                "the Kafka broker exited during startup" + (_log_tail(paths) if paths else "")
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"Kafka on {bootstrap} not ready after {timeout_s:.0f} s"
                + (_log_tail(paths) if paths else "")
            )
        if _port_open(host, port) and metadata_ready(bootstrap, min(5.0, max(1.0, remaining))):
            return
        time.sleep(0.25)


def _log_tail(paths: BrokerPaths, lines: int = 25) -> str:
    out = []
    for path in (paths.out_file, paths.server_log):
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        out.append(f"\n--- last lines of {path} ---\n" + "\n".join(text))
    return "".join(out)


def _format_storage(paths: BrokerPaths, heap: str) -> None:
    if (paths.data / "meta.properties").exists():
        return
    if paths.cluster_id.exists():
        cluster_id = paths.cluster_id.read_text().strip()
    else:
        cluster_id = _new_cluster_id()
        paths.cluster_id.write_text(cluster_id + "\n")
    cmd = [
        _java(),
        *_jvm_args(paths, heap),
        "-cp",
        _classpath(),
        "kafka.tools.StorageTool",
        "format",
        "--config",
        str(paths.properties),
        "--cluster-id",
        cluster_id,
        "--ignore-formatted",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=paths.root, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"kafka storage format failed (exit {done.returncode}):\n{done.stdout}{done.stderr}"
        )


def status(config: KafkaConfig | None = None) -> KafkaStatus:
    config = config or load_config().kafka
    paths = broker_paths(config)
    pid = _running_pid(paths)
    host, port = parse_bootstrap(config.bootstrap_servers)
    reachable = _port_open(host, port) and metadata_ready(config.bootstrap_servers, 3.0)
    return KafkaStatus(pid is not None, pid, config.bootstrap_servers, reachable, str(paths.root))


def start(
    config: KafkaConfig | None = None,
    *,
    controller_port: int | None = None,
    timeout_s: float = 120.0,
    heap: str = "1g",
    die_with_parent: bool = False,
) -> StartResult:
    """Start the broker unless it runs already; return once kafka-python can fetch metadata.

    The broker outlives the caller (`routectl kafka start`), unless `die_with_parent`: then the
    kernel kills it when the calling process ends, however it ends (`routectl demo`)."""
    began = time.monotonic()
    config = config or load_config().kafka
    paths = broker_paths(config)
    host, port = parse_bootstrap(config.bootstrap_servers)
    controller_port = controller_port or port + 1
    with _locked(paths):
        pid = _running_pid(paths)
        if pid is not None:
            running = pid
            wait_ready(
                config.bootstrap_servers, timeout_s, lambda: _is_our_broker(running, paths), paths
            )
            return StartResult(False, pid, time.monotonic() - began)
        if _port_open(host, port):
            if metadata_ready(config.bootstrap_servers):
                return StartResult(False, None, time.monotonic() - began)
            raise RuntimeError(f"{host}:{port} is in use by something that is not Kafka")
        if not _port_free(host, controller_port):
            raise RuntimeError(
                f"controller port {host}:{controller_port} is in use "
                "(pass another one with --controller-port)"
            )
        for directory in (paths.root, paths.data, paths.logs):
            directory.mkdir(parents=True, exist_ok=True)
        paths.properties.write_text(server_properties(paths, host, port, controller_port))
        paths.log4j.write_text(LOG4J_PROPERTIES)
        _format_storage(paths, heap)
        cmd = [
            _java(),
            *_jvm_args(paths, heap),
            "-cp",
            _classpath(),
            "kafka.Kafka",
            str(paths.properties),
        ]
        with open(paths.out_file, "ab") as out:
            process = subprocess.Popen(
                cmd,
                cwd=paths.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=lifeline.die_with_parent() if die_with_parent else None,
            )
        paths.pid_file.write_text(f"{process.pid}\n")
        try:
            # Not _is_our_broker: /proc/<pid>/cmdline can read empty right after exec.
            wait_ready(config.bootstrap_servers, timeout_s, lambda: process.poll() is None, paths)
        except BaseException:
            _terminate(process.pid, paths, 15.0)
            raise
        return StartResult(True, process.pid, time.monotonic() - began)


def _terminate(pid: int, paths: BrokerPaths, timeout_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _is_our_broker(pid, paths) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _is_our_broker(pid, paths):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while _is_our_broker(pid, paths) and time.monotonic() < deadline:
            time.sleep(0.1)
    with contextlib.suppress(FileNotFoundError):
        paths.pid_file.unlink()


def stop(config: KafkaConfig | None = None, *, timeout_s: float = 30.0) -> bool:
    """SIGTERM the broker, SIGKILL it after `timeout_s`; True if one was running."""
    config = config or load_config().kafka
    paths = broker_paths(config)
    with _locked(paths):
        pid = _running_pid(paths)
        if pid is None:
            with contextlib.suppress(FileNotFoundError):
                paths.pid_file.unlink()
            return False
        _terminate(pid, paths, timeout_s)
        return True


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = DEFAULT_PARTITIONS,
    *,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    timeout_s: float = 30.0,
) -> bool:
    """Create `topic` (replication 1, max.message.bytes raised); False if it already existed."""
    from kafka import KafkaAdminClient
    from kafka.errors import TopicAlreadyExistsError

    timeout_ms = int(timeout_s * 1000)
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="routelake-admin", request_timeout_ms=timeout_ms
    )
    try:
        spec = {
            topic: {
                "num_partitions": partitions,
                "replication_factor": 1,
                "configs": {"max.message.bytes": str(max_message_bytes)},
            }
        }
        try:
            admin.create_topics(spec, timeout_ms=timeout_ms, wait_for_metadata=True)
        except TopicAlreadyExistsError:
            return False
        return True
    finally:
        admin.close()


def topic_partitions(bootstrap: str, topic: str) -> int | None:
    """Number of partitions of `topic`, None if it does not exist."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="routelake-admin")
    try:
        for item in admin.describe_topics([topic]):
            if item.get("name") == topic and not item.get("error_code"):
                return len(item.get("partitions") or [])
        return None
    finally:
        admin.close()


def _ensure_topic(bootstrap: str, topic: str, partitions: int) -> str:
    created = create_topic(bootstrap, topic, partitions)
    if created:
        return f"created topic {topic} with {partitions} partitions"
    existing = topic_partitions(bootstrap, topic)
    return f"topic {topic} exists ({existing} partitions)"


def add_kafka_args(parser: argparse.ArgumentParser) -> None:
    """`routectl kafka`'s arguments."""
    parser.add_argument("action", choices=["start", "stop", "status", "topic"])
    parser.add_argument("--topic", help="topic to create (default: kafka.topic of the config)")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--no-topic", action="store_true", help="start: do not create a topic")
    parser.add_argument("--controller-port", type=int, help="default: client port + 1")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds (start/stop)")
    parser.add_argument("--heap", default="1g", help="JVM -Xmx (default 1g)")


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """SIGTERM (and a hangup: routectl maps it to SIGTERM) raises SystemExit meanwhile, so that
    `start` stops the broker it has not handed over yet, as it does on Ctrl-C."""

    def on_terminate(*_: object) -> None:
        raise SystemExit(128 + signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, on_terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_kafka(args: argparse.Namespace, full_config: Config) -> int:
    """`routectl kafka start|stop|status|topic`; status exits 3 when nothing runs."""
    config = full_config.kafka
    topic = args.topic or config.topic
    try:
        if args.action == "start":
            with _terminate_raises():  # a broker still starting is stopped with its caller
                result = start(
                    config,
                    controller_port=args.controller_port,
                    timeout_s=args.timeout,
                    heap=args.heap,
                )
            what = (
                f"started (pid {result.pid})"
                if result.started
                else "already running" + (f" (pid {result.pid})" if result.pid else "")
            )
            print(f"kafka {config.bootstrap_servers}: {what} in {result.seconds:.1f} s")
            if not args.no_topic:
                print(_ensure_topic(config.bootstrap_servers, topic, args.partitions))
            return 0
        if args.action == "stop":
            stopped = stop(config, timeout_s=args.timeout)
            print(f"kafka {config.bootstrap_servers}: " + ("stopped" if stopped else "not running"))
            return 0
        if args.action == "topic":
            print(_ensure_topic(config.bootstrap_servers, topic, args.partitions))
            return 0
        current = status(config)
        print(current.describe())
        return 0 if current.running or current.reachable else 3
    except (RuntimeError, ValueError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
