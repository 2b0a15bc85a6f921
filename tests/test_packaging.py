"""`pip install .` without `-e`: a wheel built from the sources, installed with
--no-deps into a fresh virtualenv whose dependencies come from .venv's site-packages through
symlinks (no editable-install hook, no extras: matplotlib and uvloop left out), run from a
directory outside the repo: `routectl --help`, the job entry files, a tiny backfill of a golden
fixture whose dump equals the fixture's expected output, and the lookup serving it without uvloop.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from routing_lib.core.dump import project
from routing_lib.read.warehouse import load_snapshot
from tests.support.helpers import GOLDEN, expected_dump

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parent.parent
EXTRAS = ("matplotlib", "mpl_toolkits", "pylab", "uvloop")  # the plot / uvloop extras
LOOKUP_PORT, LOOKUP_HTTP_PORT = 29803, 29804
FIXTURE = "01_master_registers"


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    cwd: Path  # outside the repo

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTELAKE_")}
        # Spark's Python workers must be this venv's interpreter, not .venv's.
        env.update(PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python)
        env.pop("PYTHONPATH", None)
        return env

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60):
        return subprocess.run(
            list(args),
            cwd=self.cwd,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def routectl(self, *args: str, **kw):
        return self.run(str(self.venv / "bin" / "routectl"), *args, **kw)


def _packaged_sources(dest: Path) -> None:
    """Copy what the wheel is built from (pyproject's package list), without build leftovers."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = {pattern.rstrip("*").rstrip(".") for pattern in include}
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for top in sorted(tops):
        shutil.copytree(REPO / top, dest / top, ignore=ignore)


def _dependencies_without_extras(dest: Path) -> None:
    """Symlinks to every top-level entry of .venv's site-packages except routelake's own
    (editable hook, egg-link, dist-info), the .pth files and the extras' packages."""
    dest.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name
        lower = name.lower()
        if (
            name.endswith(".pth")
            or "routelake" in lower
            or "__editable__" in name
            or lower.startswith(EXTRAS)
        ):
            continue
        (dest / name).symlink_to(entry)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    src, wheels, venv, cwd = (root / n for n in ("src", "wheels", "venv", "cwd"))
    src.mkdir()
    cwd.mkdir()
    _packaged_sources(src)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", str(src), "-w", str(wheels)],
        check=True,
        cwd=root,
        timeout=300,
    )
    (wheel,) = wheels.glob("routelake-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    venv_python = str(venv / "bin" / "python")
    subprocess.run(
        [*pip, "--python", venv_python, "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    deps = root / "deps"
    _dependencies_without_extras(deps)
    # A plain path entry: added to sys.path, but .pth files inside it are not processed.
    site = subprocess.run(
        [venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "_routelake_test_deps.pth").write_text(f"{deps}\n")
    return Installed(wheel, venv, cwd)


def test_wheel_ships_the_defaults_and_the_job_entry_files(installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    assert "routing_lib/defaults/routelake.toml" in names
    assert {f"routing_lib/jobs/submit/{job}.py" for job in ("route_state", "backfill")} <= names
    console = {"index.html", "console.js", "console.css"}  # the web console's assets
    assert {f"routing_lib/console/static/{name}" for name in console} <= names
    assert not any(n.startswith(("tests/", "conf/", "jobs/")) for n in names)
    metadata = zipfile.ZipFile(installed.wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))
    )
    text = metadata.decode()
    # The heavy parts are extras, not requirements.
    assert "Provides-Extra: plot" in text and "Provides-Extra: uvloop" in text
    assert 'Requires-Dist: matplotlib==3.11.2; extra == "plot"' in text
    assert 'Requires-Dist: uvloop==0.23.0; extra == "uvloop"' in text
    assert "Requires-Dist: pyspark==4.0.1" in text


def test_the_installed_package_is_the_one_that_runs(installed):
    probe = installed.run(
        installed.python,
        "-c",
        "import routing_lib, routing_lib.config as c; "
        "print(routing_lib.__file__); print(c.DEFAULT_CONFIG); print(c.project_path('.work/w'))",
    )
    assert probe.returncode == 0, probe.stderr
    module, defaults, relative = probe.stdout.split()
    assert Path(module).is_relative_to(installed.venv)
    assert Path(defaults).is_relative_to(installed.venv) and Path(defaults).is_file()
    # Installed, relative config paths are relative to the current directory.
    assert Path(relative) == installed.cwd / ".work" / "w"
    for extra in ("matplotlib", "uvloop"):
        absent = installed.run(installed.python, "-c", f"import {extra}")
        assert absent.returncode != 0 and "ModuleNotFoundError" in absent.stderr


def test_routectl_help_and_job_entry_files(installed):
    helped = installed.routectl("--help")
    assert helped.returncode == 0, helped.stderr
    for command in ("backfill", "run", "serve", "collect", "dump", "job-path"):
        assert command in helped.stdout
    for job, command in (("route_state", "run"), ("backfill", "backfill")):
        path = installed.routectl("job-path", job)
        assert path.returncode == 0, path.stderr
        entry = Path(path.stdout.strip())
        assert entry.is_file() and entry.is_relative_to(installed.venv)
        # The entry file spark-submit would run: here its --help (no Spark needed).
        usage = installed.run(installed.python, str(entry), "--help")
        assert usage.returncode == 0, usage.stderr
        assert usage.stdout.startswith(f"usage: routectl {command}")


def test_history_plot_without_the_plot_extra_says_what_to_install(installed):
    plotted = installed.routectl(
        "history", "plot", "--out", "x.png", "--warehouse", str(installed.cwd / "none")
    )
    assert plotted.returncode == 2
    assert "history plot needs matplotlib: pip install 'routelake[plot]'" in plotted.stderr


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_tiny_backfill_from_the_wheel_then_served_without_uvloop(installed):
    warehouse = installed.cwd / "warehouse"
    env = installed.env()
    # Spark's jars are not Python packages: point at the ones scripts/setup.sh fetched.
    env["ROUTELAKE_SPARK_JARS_DIR"] = str(REPO / ".jars" / "spark")
    started = time.monotonic()
    done = installed.routectl(
        "backfill",
        "--input",
        str(GOLDEN / FIXTURE / "events.jsonl"),
        "--warehouse",
        "warehouse",  # relative: from the current directory
        env=env,
        timeout=300,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    dumped = installed.routectl("dump", "--warehouse", str(warehouse))
    assert dumped.returncode == 0, dumped.stderr
    assert project(json.loads(dumped.stdout)) == expected_dump(FIXTURE)
    print(f"backfill from the wheel: {took:.1f} s")

    serve_env = {**installed.env(), "ROUTELAKE_SERVE_POLL_INTERVAL_S": "0.2"}
    server = subprocess.Popen(
        [
            str(installed.venv / "bin" / "routectl"),
            "serve",
            "--warehouse",
            str(warehouse),
            "--port",
            str(LOOKUP_PORT),
            "--http-port",
            str(LOOKUP_HTTP_PORT),
            "-v",
        ],
        cwd=installed.cwd,
        env=serve_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        status = 0
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status, _ = _get(f"http://127.0.0.1:{LOOKUP_HTTP_PORT}/readyz")
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.3)
        assert status == 200
        code, body = _get(f"http://127.0.0.1:{LOOKUP_HTTP_PORT}/clusters")
        assert code == 200 and "broker-a" in body
        # the console, from the installed package's own files
        code, body = _get(f"http://127.0.0.1:{LOOKUP_HTTP_PORT}/")
        assert code == 200 and 'src="/console/console.js"' in body
        code, body = _get(f"http://127.0.0.1:{LOOKUP_HTTP_PORT}/console/console.js")
        assert code == 200 and "createElement" in body
        code, body = _get(f"http://127.0.0.1:{LOOKUP_HTTP_PORT}/console/api/fleet")
        assert code == 200 and '"status":"ok"' in body and "broker-a" in body
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr[-3000:]
    assert "uvloop not installed (pip install 'routelake[uvloop]')" in stderr


def test_spark_submit_of_a_job_file_as_the_readme_types_it(tmp_path):
    """After scripts/setup.sh, `spark-submit jobs/backfill.py ...` with the venv's bin on PATH
    (`source .venv/bin/activate`), nothing else set: pyspark's spark-submit finds Spark with the
    `python3` on PATH, and the Delta and Kafka jars come from the venv's Spark defaults (the
    JVM starts before the job's session builder could add them)."""
    fixture = "08_role_switch"
    venv_bin = REPO / ".venv" / "bin"
    dropped = ("ROUTELAKE_", "PYSPARK_", "SPARK_HOME", "SPARK_CONF_DIR", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    warehouse = tmp_path / "warehouse"
    command = "spark-submit jobs/backfill.py --input {} --warehouse {}"
    done = subprocess.run(
        command.format(GOLDEN / fixture / "events.jsonl", warehouse).split(),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert project(load_snapshot(warehouse).dump()) == expected_dump(fixture)
