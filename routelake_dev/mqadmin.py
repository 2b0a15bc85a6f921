"""Run the real RocketMQ Java tools from plain jars (scripts/fetch_rocketmq.sh puts them in
.jars/rocketmq/): mqadmin (`MQAdminStartup`, a real RocketMQ 5.x Java client) against a name
server, and the command line to start the Java NameServer (`NamesrvStartup`).

How the jars behave outside a RocketMQ distribution, and what is done about it here:
- Logging: rocketmq-common's logback Configurator takes the first `rmq.*.logback.xml` on the
  class path; with rocketmq-namesrv there too that is the NameServer's. The system property
  `rmq.logback.configurationFile` picks one (`rmq.tools.logback.xml` for mqadmin). All of them
  write under `${user.home}/logs/rocketmqlogs`, so `user.home` is always set to a scratch
  directory: nothing is written to the real home.
- ROCKETMQ_HOME: mqadmin only reads `$ROCKETMQ_HOME/conf/tools.yml` (ACL; absent = no ACL,
  one WARN in its log); the NameServer refuses to start without it. Both get the scratch dir.
- mqadmin exits 0 even when the command failed: it prints the exception's stack trace to
  stderr and returns. `MQAdminResult.error` finds it; `code`/`remark` parse RocketMQ's
  `CODE: 17  DESC: ...` (MQClientException) out of it.
- Each run takes ~4-7 s of wall time, ~1 s of it CPU: the client's NettyEventExecutor waits
  out a 3 s poll when it shuts down. Run independent commands concurrently.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from routing_lib.lookup import jsonbody

REPO = Path(__file__).resolve().parents[1]
JARS_ENV = "ROUTELAKE_ROCKETMQ_JARS"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
TOOLS_LOGBACK = "rmq.tools.logback.xml"
NAMESRV_LOGBACK = "rmq.namesrv.logback.xml"
# A short-lived client: small heap, quick JIT; what tools.sh sets (1 GiB heap) is not needed.
MQADMIN_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

_CLIENT_ERROR = re.compile(r"CODE:\s*(-?\d+)\s+DESC:\s*(.*?)(?:\n\tat |\Z)", re.S)


class RocketMQToolsMissing(RuntimeError):
    """No jars (run scripts/fetch_rocketmq.sh) or no `java` on PATH."""


def jars_dir(path: str | Path | None = None) -> Path:
    """Where the jars are: `path`, else $ROUTELAKE_ROCKETMQ_JARS, else <repo>/.jars/rocketmq."""
    return Path(path or os.environ.get(JARS_ENV) or REPO / ".jars" / "rocketmq")


def missing_reason(jars: str | Path | None = None) -> str | None:
    """Why the tools cannot run here, or None when they can."""
    folder = jars_dir(jars)
    if shutil.which("java") is None:
        return "no java on PATH"
    for stem in ("rocketmq-tools", "rocketmq-namesrv"):
        if not any(folder.glob(f"{stem}-*.jar")):
            return f"no {stem} jar in {folder} (run scripts/fetch_rocketmq.sh)"
    return None


def java_command(
    main: str,
    args: Sequence[str],
    *,
    home: str | Path,
    jars: str | Path | None = None,
    logback: str = TOOLS_LOGBACK,
    jvm_opts: Sequence[str] = (),
) -> list[str]:
    """argv for one JVM running `main` from the jars, with user.home (so every log and store
    file) under `home`."""
    return [
        "java",
        *jvm_opts,
        f"-Duser.home={home}",
        f"-Drocketmq.home.dir={home}",
        f"-Drmq.logback.configurationFile={logback}",
        "-cp",
        str(jars_dir(jars) / "*"),
        main,
        *args,
    ]


def java_env(home: str | Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ROCKETMQ_SERIALIZE_TYPE", "NAMESRV_ADDR", "JAVA_TOOL_OPTIONS")
    }
    env["ROCKETMQ_HOME"] = str(home)
    return env


@dataclass(frozen=True)
class MQAdminResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed after the timeout
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def error(self) -> str | None:
        """The failure mqadmin printed (it exits 0 anyway), or None when the command worked."""
        if self.timed_out:
            return "timed out"
        if self.returncode != 0:
            return f"exit code {self.returncode}: {self.stderr.strip()[-2000:]}"
        lines = [
            line
            for line in self.stderr.splitlines()
            if line and not line.startswith(("\tat ", "\t... ", "Caused by: "))
        ]
        failures = [line for line in lines if "Exception" in line or "Error" in line]
        return "\n".join(failures) if failures else None

    @property
    def code(self) -> int | None:
        """The RocketMQ response code of an MQClientException in the output (e.g. 17)."""
        match = _CLIENT_ERROR.search(self.stderr)
        return int(match.group(1)) if match else None

    @property
    def remark(self) -> str | None:
        match = _CLIENT_ERROR.search(self.stderr)
        return match.group(2).rstrip() if match else None


def run_mqadmin(
    command: str,
    *args: str,
    namesrv: str,
    timeout: float = 60.0,
    home: str | Path | None = None,
    jars: str | Path | None = None,
    serialize_type: str | None = None,
    jvm_opts: Sequence[str] = MQADMIN_JVM_OPTS,
) -> MQAdminResult:
    """`mqadmin COMMAND ARGS -n NAMESRV` as a JVM, killed after `timeout` seconds.

    `home` keeps its logs (default: a temporary directory, removed afterwards);
    `serialize_type` "ROCKETMQ" makes the client use the binary header instead of JSON.
    """
    reason = missing_reason(jars)
    if reason is not None:
        raise RocketMQToolsMissing(reason)
    scratch = None
    if home is None:
        scratch = tempfile.mkdtemp(prefix="mqadmin-")
        home = scratch
    Path(home).mkdir(parents=True, exist_ok=True)
    opts = list(jvm_opts)
    if serialize_type is not None:
        opts.append(f"-Drocketmq.serialize.type={serialize_type}")
    argv = java_command(
        MQADMIN_MAIN, [command, *args, "-n", namesrv], home=home, jars=jars, jvm_opts=opts
    )
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=java_env(home),
            cwd=home,
            stdin=subprocess.DEVNULL,
        )
        return MQAdminResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
    except subprocess.TimeoutExpired as exc:  # run() has killed and reaped the JVM
        return MQAdminResult(tuple(argv), None, _text(exc.stdout), _text(exc.stderr))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


# -- reading what mqadmin prints --


def parse_topic_route(stdout: str) -> dict:
    """`topicRoute -t T`: TopicRouteData as fastjson pretty-prints it (brokerAddrs keys bare
    Longs, so not standard JSON); brokerAddrs keys come back as strings."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError(f"no JSON object in mqadmin output: {stdout[:200]!r}")
    return jsonbody.parse_legacy(stdout[start:].encode())


@dataclass(frozen=True)
class ClusterListRow:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str


def parse_cluster_list(stdout: str) -> list[ClusterListRow]:
    """`clusterList`: the first four columns of each broker line (the rest are runtime stats
    fetched from the brokers themselves, empty when they cannot be reached)."""
    rows = []
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) < 4 or line.startswith("#") or not fields[2].isdigit():
            continue
        rows.append(ClusterListRow(fields[0], fields[1], int(fields[2]), fields[3]))
    return rows


def parse_topic_list(stdout: str) -> list[str]:
    """`topicList` (without -c): one topic per line."""
    return [line.strip() for line in stdout.splitlines() if line.strip()]
