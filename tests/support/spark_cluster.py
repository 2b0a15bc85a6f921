"""A Spark standalone cluster on this machine for the `cluster` tests: one master and two
workers (1 core, 1 GiB each) started from the pyspark install, bound to 127.0.0.1, on the fixed
ports 29600-29617 (docs/spark-cluster.md).

Jobs go through deploy/spark-submit.sh with routelake shipped as a `--py-files` zip, and the
executors run an interpreter that has the third-party packages but not routelake: a venv whose
only site entry is a plain path to .venv's site-packages (a plain path in a .pth does not run
that folder's own .pth files, so the editable install's import hook never loads there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
MASTER_PORT, MASTER_UI_PORT = 29600, 29601
WORKER_PORTS = [(29602, 29603), (29604, 29605)]  # (RPC, web UI) per worker
# The driver's RPC and block manager, then the executors' block managers; each may move up by
# spark.port.maxRetries (3) when taken, which keeps every port below 29618.
DRIVER_PORT, DRIVER_BLOCK_MANAGER_PORT, EXECUTOR_BLOCK_MANAGER_PORT = 29606, 29610, 29614
MASTER_URL = f"spark://127.0.0.1:{MASTER_PORT}"
# Short-lived JVMs on 2 shared cores: C1 only and the serial GC spend far less CPU on warm-up.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _base_env() -> dict[str, str]:
    """This environment without anything that would put the project on a JVM's or worker's path."""
    drop = {"PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "SPARK_CONF_DIR"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1")
    return env


def executor_python(folder: Path) -> Path:
    """A venv with .venv's third-party packages as a plain path entry, and no routelake."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
    (site / "routelake-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return folder / "bin" / "python"


def build_py_files(out: Path) -> Path:
    """deploy/pyfiles.py: routing_lib + schemas as one zip."""
    built = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "pyfiles.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(built.stdout.strip())


@dataclass
class Cluster:
    base: Path
    python: Path
    worker_dirs: list[Path]
    py_files: Path = field(init=False)  # the zip the last submit shipped
    processes: list[subprocess.Popen] = field(default_factory=list)

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{MASTER_UI_PORT}/json/", timeout=5) as r:
            return json.load(r)

    def finished_app(self, name: str) -> dict:
        """The last finished application of that name, as the master lists it."""
        apps = [a for a in self.state()["completedapps"] if a["name"] == name]
        assert apps, f"the master lists no finished application {name!r}"
        return max(apps, key=lambda a: a["starttime"])

    def executor_dirs(self, app_id: str) -> list[Path]:
        return sorted(p for d in self.worker_dirs for p in (d / app_id).glob("*") if p.is_dir())

    def submit(self, app: str, *args: str, shuffle_partitions: int = 2, timeout: float = 600):
        """deploy/spark-submit.sh APP ARGS against the cluster; returns the completed process.

        The zip is built right before each submit: the driver imports routelake from this
        checkout, and the executors must run the same code."""
        self.py_files = build_py_files(self.base / "dist")
        env = _base_env()
        env.update(
            SPARK_MASTER=MASTER_URL,
            SHUFFLE_PARTITIONS=str(shuffle_partitions),
            PYSPARK_PYTHON=sys.executable,  # the driver's (spark-submit finds SPARK_HOME with it)
        )
        confs = {
            "spark.pyspark.python": self.python,  # the executors' interpreter
            "spark.pyspark.driver.python": sys.executable,
            "spark.driver.port": DRIVER_PORT,
            "spark.driver.blockManager.port": DRIVER_BLOCK_MANAGER_PORT,
            "spark.blockManager.port": EXECUTOR_BLOCK_MANAGER_PORT,
            "spark.port.maxRetries": 3,
            # start only once both executors are up, so that both take part
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
        }
        command = [str(ROOT / "deploy" / "spark-submit.sh"), "--driver-memory", "1g"]
        command += ["--executor-memory", "1g", "--py-files", str(self.py_files)]
        for key, value in confs.items():
            command += ["--conf", f"{key}={value}"]
        command += [str(ROOT / app), *args]
        done = subprocess.run(
            command, cwd=self.base, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, (
            f"{app} failed ({done.returncode}):\n{_cause(done.stderr)}\n{done.stdout[-2000:]}"
        )
        return done

    def start(self) -> None:
        env = _base_env()
        env.update(
            SPARK_DAEMON_MEMORY="512m",
            # a taken port fails the start instead of binding the next one, outside the range
            SPARK_DAEMON_JAVA_OPTS=f"{JVM_OPTIONS} -Dspark.port.maxRetries=0 "
            "-Dspark.master.rest.enabled=false",
        )
        master = ["--host", "127.0.0.1", "--port", str(MASTER_PORT)]
        self._daemon("master", "master.Master", [*master, "--webui-port", str(MASTER_UI_PORT)], env)
        for i, (port, ui_port) in enumerate(WORKER_PORTS):
            work = self.worker_dirs[i]
            work.mkdir(parents=True)
            args = [MASTER_URL, "--host", "127.0.0.1", "--port", str(port)]
            args += ["--webui-port", str(ui_port), "--cores", "1", "--memory", "1g"]
            args += ["--work-dir", str(work)]
            self._daemon(f"worker{i}", "worker.Worker", args, dict(env, SPARK_WORKER_DIR=str(work)))
        self._wait_for_workers(len(WORKER_PORTS))

    def _daemon(self, name: str, cls: str, args: list[str], env: dict[str, str]) -> None:
        log = open(self.base / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        self.processes.append(
            subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), f"org.apache.spark.deploy.{cls}", *args],
                cwd=self.base,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends executors too
            )
        )

    def _wait_for_workers(self, count: int, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.processes):
                break  # a daemon exited: its log says why
            try:
                if self.state().get("aliveworkers") == count:
                    return
            except OSError:
                pass
            time.sleep(1)
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.base.glob("*.log"))
        )
        raise AssertionError(f"the standalone cluster did not come up:\n{logs}")

    def stop(self) -> None:
        """Workers first (each takes its executors and their Python workers), then the master."""
        for process in reversed(self.processes):
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(10)


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)  # the group this fixture started (start_new_session)
    except ProcessLookupError:
        pass


def _cause(stderr: str) -> str:
    """The last Python traceback in a failed submit's log (the JVM's stack follows it), else
    the log's end."""
    start = stderr.rfind("Traceback (most recent call last)")
    return stderr[start : start + 3000] if start >= 0 else stderr[-3000:]
