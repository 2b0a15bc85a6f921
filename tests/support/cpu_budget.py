"""A CPU and a wall-time budget per test module: a pytest plugin that measures the CPU each test
module costs (every process the run started, not only pytest's) and its wall seconds, and fails
the run when a module goes past either budget in tests/cpu_budget.toml, so that a slower suite
is a decision, not a drift. It also prints the modules that wait the most (wall minus CPU): the
suite is no longer CPU-bound, and those are where simulated time can be shortened.

Loaded by the test command (scripts/test.sh):

    pytest -p tests.support.cpu_budget --cpu-budget tests/cpu_budget.toml \\
        --cpu-figures .work/test-cpu.toml

Where the CPU is read from, best first:

- a cgroup (`ROUTELAKE_CPU_CGROUP`: a cgroup v1 cpuacct directory, read from `cpuacct.usage`,
  or a cgroup v2 directory, read from `usage_usec` in `cpu.stat`) that scripts/test.sh creates
  around the run when it may (as root, with cgroups writable). Every process started inside
  stays in it, daemons and orphans included;
- otherwise the process tree: this process's CPU and its reaped children's (getrusage), plus
  the CPU of every live descendant read from /proc (its own and its reaped children's). A
  process that leaves the tree (re-parented to init when its parent exits) stops being counted.

A test's CPU is the reading after it (teardown included) minus the reading before it (setup
included), so session and module fixtures count in the module whose test starts or stops them.

Under pytest-xdist (`-n N`: the test command runs the unit tier so) each worker measures its own
process tree (a cgroup would hold the other workers' CPU too) and hands its figures to the
controller, which adds them up per module: a module's CPU and wall are then the sums over its
tests, as in a run of one process.

The wall budget (`[wall]`, `default_wall_s`) is checked the same way; on a machine shared with
other work, `ROUTELAKE_WALL_BUDGET_SCALE=3` (say) widens every wall budget.

A run in parts (the test command's unit tier, then its two lanes) writes one figures file per
part; `merge` adds them up per module (a module may have tests in two parts) and `check` checks
the sums against the budgets, which no part alone can do:

    .venv/bin/python -m tests.support.cpu_budget merge A.toml B.toml --output ALL.toml
    .venv/bin/python -m tests.support.cpu_budget check ALL.toml tests/cpu_budget.toml

After a full run, regenerate both budgets from the figures the run wrote:

    .venv/bin/python -m tests.support.cpu_budget regenerate \\
        .work/test-cpu.toml tests/cpu_budget.toml
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
import tomllib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# A module's budget is generous: CPU seconds vary with load (cache misses, JIT timing, polls that
# spin longer) and a budget must not fail CI on noise, only on growth.
BUDGET_FACTOR = 1.6
BUDGET_MIN_HEADROOM_S = 40.0
# A module not in the budget file yet (a new one): as much as a mid-sized integration module.
DEFAULT_BUDGET_S = 300.0
# Wall seconds vary more than CPU (a registration period landing late, a JVM start under load):
# the same shape of headroom, wider.
WALL_BUDGET_FACTOR = 1.5
WALL_BUDGET_MIN_HEADROOM_S = 60.0
DEFAULT_WALL_BUDGET_S = 400.0
# On a machine shared with other work (a developer's, not CI) wall times stretch: this
# environment variable multiplies every wall budget (e.g. 3); CPU budgets are not affected.
WALL_SCALE_ENV = "ROUTELAKE_WALL_BUDGET_SCALE"
# How many modules the summary lists by waiting time (wall minus CPU).
WAITERS_SHOWN = 15
# The key of an xdist worker's figures in what it sends back to the controller (workeroutput).
WORKER_OUTPUT_KEY = "routelake_cpu_budget"

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def budget_for(measured_s: float) -> float:
    """The budget for a module measured at `measured_s`, rounded up to 10 s."""
    raw = max(BUDGET_FACTOR * measured_s, measured_s + BUDGET_MIN_HEADROOM_S)
    return float(math.ceil(raw / 10) * 10)


def wall_budget_for(measured_s: float) -> float:
    """The wall budget for a module that took `measured_s` seconds, rounded up to 10 s."""
    raw = max(WALL_BUDGET_FACTOR * measured_s, measured_s + WALL_BUDGET_MIN_HEADROOM_S)
    return float(math.ceil(raw / 10) * 10)


# --- reading CPU time ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuMeter:
    """`read()`: CPU seconds used so far by what is measured; `source` says what that is."""

    source: str
    read: Callable[[], float]


def cgroup_meter(path: Path) -> CpuMeter | None:
    """A meter over cgroup `path` (v1 cpuacct or v2), or None when it cannot be read."""
    v1, v2 = path / "cpuacct.usage", path / "cpu.stat"
    if v1.is_file():

        def read_v1() -> float:
            return int(v1.read_text()) / 1e9

        meter = CpuMeter(f"cgroup v1 cpuacct {path}", read_v1)
    elif v2.is_file():

        def read_v2() -> float:
            for line in v2.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            raise OSError(f"no usage_usec in {v2}")

        meter = CpuMeter(f"cgroup v2 {path}", read_v2)
    else:
        return None
    try:
        meter.read()
    except (OSError, ValueError):
        return None
    return meter


def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU s of the process and of its reaped children) from /proc."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat_file:
                text = stat_file.read()
        except OSError:  # gone since the listing
            continue
        # the command name (2nd field) may hold spaces and parentheses: split after the last ')'
        fields = text[text.rindex(b")") + 2 :].split()
        utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
        stats[int(entry.name)] = (int(fields[1]), (utime + stime + cutime + cstime) / _CLOCK_TICKS)
    return stats


def process_tree_cpu_s() -> float:
    """CPU s of this process, its reaped descendants and its live descendants."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    pending = list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        total += stats[pid][1]
        pending += children.get(pid, [])
    return total


def tree_meter() -> CpuMeter:
    return CpuMeter(
        "process tree (getrusage + /proc; processes that leave the tree are not counted)",
        process_tree_cpu_s,
    )


def choose_meter(environ: Mapping[str, str]) -> CpuMeter:
    group = environ.get("ROUTELAKE_CPU_CGROUP", "")
    meter = cgroup_meter(Path(group)) if group else None
    return meter or tree_meter()


# --- budgets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    default_s: float = DEFAULT_BUDGET_S
    modules: Mapping[str, float] = field(default_factory=dict)
    unit: str = "CPU-s"  # how the figures read: "CPU-s" or "s wall"

    def of(self, module: str) -> float:
        return self.modules.get(module, self.default_s)

    def scaled(self, factor: float) -> Budget:
        """Every budget times `factor` (the wall budgets on a shared machine)."""
        modules = {m: s * factor for m, s in self.modules.items()}
        return Budget(self.default_s * factor, modules, self.unit)


@dataclass(frozen=True)
class Overrun:
    module: str
    measured_s: float
    budget_s: float
    listed: bool  # False: the module had the default budget
    unit: str = "CPU-s"

    def __str__(self) -> str:
        budget = "budget" if self.unit == "CPU-s" else "wall budget"
        where = f"its {budget}" if self.listed else f"the default {budget} (not in the file)"
        return (
            f"{self.module}: {self.measured_s:.1f} {self.unit}, over {where} of "
            f"{self.budget_s:g} {self.unit} by {self.measured_s - self.budget_s:.1f}"
        )


def load_budget(path: Path) -> Budget:
    data = tomllib.loads(path.read_text())
    modules = {str(k): float(v) for k, v in data.get("modules", {}).items()}
    return Budget(float(data.get("default_cpu_s", DEFAULT_BUDGET_S)), modules)


def load_wall_budget(path: Path, scale: float = 1.0) -> Budget:
    """The `[wall]` table and `default_wall_s` of a budget file, every budget times `scale`."""
    data = tomllib.loads(path.read_text())
    modules = {str(k): float(v) for k, v in data.get("wall", {}).items()}
    default_s = float(data.get("default_wall_s", DEFAULT_WALL_BUDGET_S))
    return Budget(default_s, modules, "s wall").scaled(scale)


def wall_scale(environ: Mapping[str, str]) -> float:
    """The factor of the wall budgets: `ROUTELAKE_WALL_BUDGET_SCALE`, 1 when unset."""
    text = environ.get(WALL_SCALE_ENV, "").strip()
    if not text:
        return 1.0
    scale = float(text)
    if not scale > 0:
        raise ValueError(f"{WALL_SCALE_ENV} must be a positive number, not {text!r}")
    return scale


def check(figures: Mapping[str, float], budget: Budget) -> list[Overrun]:
    """The modules whose figure is over their budget, largest overrun first."""
    overruns = [
        Overrun(module, measured, budget.of(module), module in budget.modules, budget.unit)
        for module, measured in figures.items()
        if measured > budget.of(module)
    ]
    return sorted(overruns, key=lambda o: o.budget_s - o.measured_s)


def wall_overrun_hint(load_average: float, cores: int) -> str:
    """What a wall overrun says besides the figures: wall budgets are set on a machine running
    the suite alone, and a loaded one stretches every wait."""
    return (
        "wall budgets assume a machine running the suite alone (load average now "
        f"{load_average:.1f} on {cores} cores); on a shared machine, {WALL_SCALE_ENV}=N widens "
        "them N times"
    )


def waiting(cpu: Mapping[str, float], wall: Mapping[str, float]) -> list[tuple[str, float]]:
    """(module, wall minus CPU seconds), most waiting first. Under 0 when a module's processes
    kept both cores busy; a module is listed once it has a wall figure."""
    waits = [(module, seconds - cpu.get(module, 0.0)) for module, seconds in wall.items()]
    return sorted(waits, key=lambda mw: (-mw[1], mw[0]))


def _toml_key(module: str) -> str:
    return '"' + module.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_figures(
    figures: Mapping[str, float], source: str, wall: Mapping[str, float] | None = None
) -> str:
    lines = [
        "# CPU seconds per test module of one run (tests/support/cpu_budget.py)",
        f'source = "{source}"',
        "",
        "[modules]",
    ]
    lines += [f"{_toml_key(m)} = {s:.1f}" for m, s in sorted(figures.items())]
    if wall:
        lines += ["", "# wall seconds per module (setup and teardown included)", "[wall]"]
        lines += [f"{_toml_key(m)} = {s:.1f}" for m, s in sorted(wall.items())]
    return "\n".join(lines) + "\n"


def load_figures(path: Path) -> dict[str, float]:
    return {str(k): float(v) for k, v in tomllib.loads(path.read_text())["modules"].items()}


def load_wall(path: Path) -> dict[str, float]:
    return {str(k): float(v) for k, v in tomllib.loads(path.read_text()).get("wall", {}).items()}


def add_figures(into: dict[str, float], part: Mapping[str, float]) -> None:
    """Adds `part`'s seconds to `into`'s, module by module."""
    for module, seconds in part.items():
        into[module] = into.get(module, 0.0) + seconds


def merge_figures(paths: list[Path]) -> str:
    """One figures file from the files of the parts of one run (the test command's unit tier
    and lanes): a module's seconds are added up over the parts that ran some of its tests."""
    figures: dict[str, float] = {}
    wall: dict[str, float] = {}
    sources: list[str] = []
    for path in paths:
        add_figures(figures, load_figures(path))
        add_figures(wall, load_wall(path))
        sources.append(str(tomllib.loads(path.read_text()).get("source", "unknown")))
    return render_figures(figures, "; ".join(dict.fromkeys(sources)), wall)


def check_file(figures_path: Path, budget_path: Path, environ: Mapping[str, str]) -> list[str]:
    """The report of checking a figures file (a whole run's, merged) against both budgets: the
    total, then one line per overrun; overruns are the lines after the first."""
    figures, wall = load_figures(figures_path), load_wall(figures_path)
    overruns = check(figures, load_budget(budget_path))
    overruns += check(wall, load_wall_budget(budget_path, wall_scale(environ)))
    lines = [
        f"{sum(figures.values()):.0f} CPU-s and {sum(wall.values()):.0f} s of tests in "
        f"{len(figures)} modules ({figures_path}), checked against {budget_path}"
    ]
    return lines + [str(overrun) for overrun in overruns]


def render_budget(
    figures: Mapping[str, float],
    source: str,
    default_s: float,
    wall: Mapping[str, float] | None = None,
    default_wall_s: float = DEFAULT_WALL_BUDGET_S,
) -> str:
    lines = [
        "# CPU budget per test module, checked by scripts/test.sh (tests/support/cpu_budget.py):",
        f"# max({BUDGET_FACTOR} x measured, measured + {BUDGET_MIN_HEADROOM_S:.0f} s),"
        " rounded up to 10 s. Regenerate after a full run:",
        "#   .venv/bin/python -m tests.support.cpu_budget regenerate .work/test-cpu.toml"
        " tests/cpu_budget.toml",
        f"# measured with: {source}",
        f"default_cpu_s = {default_s:.0f}  # a module not listed below",
        f"default_wall_s = {default_wall_s:.0f}  # a module not listed in [wall]",
        "",
        "[modules]",
    ]
    lines += [
        f"{_toml_key(m)} = {budget_for(s):.0f}  # measured {s:.1f}"
        for m, s in sorted(figures.items())
    ]
    if wall:
        lines += [
            "",
            f"# wall seconds per module: max({WALL_BUDGET_FACTOR} x measured, measured +"
            f" {WALL_BUDGET_MIN_HEADROOM_S:.0f} s), rounded up to 10 s",
            "[wall]",
        ]
        lines += [
            f"{_toml_key(m)} = {wall_budget_for(s):.0f}  # measured {s:.1f}"
            for m, s in sorted(wall.items())
        ]
    return "\n".join(lines) + "\n"


# --- the pytest plugin ---------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cpu budget", "CPU per test module (tests/support/cpu_budget.py)")
    group.addoption(
        "--cpu-budget",
        metavar="TOML",
        help="fail the run when a test module uses more CPU than its budget in this file",
    )
    group.addoption(
        "--cpu-figures", metavar="TOML", help="write each test module's CPU seconds to this file"
    )


def pytest_configure(config: pytest.Config) -> None:
    budget_path = config.getoption("--cpu-budget")
    figures_path = config.getoption("--cpu-figures")
    if not (budget_path or figures_path):
        return
    worker_output = getattr(config, "workeroutput", None)  # set in a pytest-xdist worker only
    if worker_output is not None:  # its figures go to the controller, which checks and writes
        worker = CpuRecorder(tree_meter(), None, None, None, worker_output=worker_output)
        config.pluginmanager.register(worker, "cpu_budget_recorder")
    else:
        recorder = CpuRecorder(
            choose_meter(os.environ),
            load_budget(Path(budget_path)) if budget_path else None,
            Path(figures_path) if figures_path else None,
            load_wall_budget(Path(budget_path), wall_scale(os.environ)) if budget_path else None,
        )
        config.pluginmanager.register(recorder, "cpu_budget_recorder")


class CpuRecorder:
    def __init__(
        self,
        meter: CpuMeter,
        budget: Budget | None,
        figures_path: Path | None,
        wall_budget: Budget | None = None,
        worker_output: dict[str, object] | None = None,
    ) -> None:
        self.meter = meter
        self.source = meter.source  # what the figures were read from (xdist: the workers')
        # an xdist worker's: the dict its figures go in at the end, for the controller
        self.worker_output = worker_output
        self.workers_reported = 0
        self.budget = budget
        self.wall_budget = wall_budget
        self.figures_path = figures_path
        self.figures: dict[str, float] = {}
        self.wall: dict[str, float] = {}  # wall seconds per module, setup and teardown included
        self.overruns: list[Overrun] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None]:
        before, began = self.meter.read(), time.monotonic()
        yield
        module = item.nodeid.split("::")[0]
        self.figures[module] = self.figures.get(module, 0.0) + self.meter.read() - before
        self.wall[module] = self.wall.get(module, 0.0) + time.monotonic() - began

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """The controller of a pytest-xdist run: a worker's figures, added to the others'."""
        part = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
        if not isinstance(part, dict):  # a worker that crashed sends nothing
            return
        add_figures(self.figures, part["cpu"])
        add_figures(self.wall, part["wall"])
        self.workers_reported += 1
        self.source = f"{part['source']}, in each of {self.workers_reported} pytest-xdist workers"

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.worker_output is not None:
            self.worker_output[WORKER_OUTPUT_KEY] = {
                "cpu": self.figures,
                "wall": self.wall,
                "source": self.meter.source,
            }
            return
        if self.figures_path is not None:
            self.figures_path.parent.mkdir(parents=True, exist_ok=True)
            self.figures_path.write_text(render_figures(self.figures, self.source, self.wall))
        if self.budget is not None:
            self.overruns = check(self.figures, self.budget)
        if self.wall_budget is not None:
            self.overruns += check(self.wall, self.wall_budget)
        if self.overruns and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.worker_output is not None:
            return
        report = terminalreporter
        total = sum(self.figures.values())
        report.section("CPU per test module")
        report.write_line(f"{total:.0f} CPU-s in {len(self.figures)} modules, from {self.source}")
        for module, seconds in sorted(self.figures.items(), key=lambda kv: -kv[1])[:10]:
            budget = f" (budget {self.budget.of(module):g})" if self.budget else ""
            wall = f", {self.wall.get(module, 0.0):.0f} s wall"
            report.write_line(f"  {seconds:7.1f}  {module}{budget}{wall}")
        self._write_waiters(report)
        if self.figures_path is not None:
            report.write_line(f"figures written to {self.figures_path}")
        if self.overruns:
            report.write_line(
                f"BUDGET EXCEEDED by {len(self.overruns)} module(s) (CPU or wall): speed the "
                "module up, or raise its budget on purpose (see tests/support/cpu_budget.py):",
                red=True,
                bold=True,
            )
            for overrun in self.overruns:
                report.write_line(f"  {overrun}", red=True)
            if any(o.unit != "CPU-s" for o in self.overruns):
                report.write_line(wall_overrun_hint(os.getloadavg()[1], os.cpu_count() or 1))

    def _write_waiters(self, report: pytest.TerminalReporter) -> None:
        """The modules that wait the most: wall minus CPU, with both figures and the budget."""
        report.section("waiting per test module (wall minus CPU)")
        for module, waited in waiting(self.figures, self.wall)[:WAITERS_SHOWN]:
            budget = f" (wall budget {self.wall_budget.of(module):g})" if self.wall_budget else ""
            report.write_line(
                f"  {waited:7.1f}  {module}: {self.wall[module]:.1f} s wall, "
                f"{self.figures.get(module, 0.0):.1f} CPU-s{budget}"
            )


# --- regenerating the budget file ----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.cpu_budget")
    commands = parser.add_subparsers(dest="command", required=True)
    regenerate = commands.add_parser(
        "regenerate", help="write a budget file from a full run's figures (--cpu-figures)"
    )
    regenerate.add_argument("figures", type=Path)
    regenerate.add_argument("budget", type=Path)
    regenerate.add_argument("--default-cpu-s", type=float, default=DEFAULT_BUDGET_S)
    regenerate.add_argument("--default-wall-s", type=float, default=DEFAULT_WALL_BUDGET_S)
    merge = commands.add_parser(
        "merge", help="add up the figures of a run's parts (unit tier, lanes) into one file"
    )
    merge.add_argument("figures", type=Path, nargs="+")
    merge.add_argument("--output", type=Path, required=True)
    check_command = commands.add_parser(
        "check", help="check a (merged) figures file against the budgets; exit 1 on an overrun"
    )
    check_command.add_argument("figures", type=Path)
    check_command.add_argument("budget", type=Path)
    args = parser.parse_args(argv)
    if args.command == "merge":
        args.output.write_text(merge_figures(args.figures))
        return 0
    if args.command == "check":
        total, *overruns = check_file(args.figures, args.budget, os.environ)
        print(total)
        if overruns:
            print(f"BUDGET EXCEEDED by {len(overruns)} module(s) over the whole run (CPU or wall):")
            print("\n".join(f"  {line}" for line in overruns))
            if any("s wall" in line for line in overruns):
                print(wall_overrun_hint(os.getloadavg()[1], os.cpu_count() or 1))
        return 1 if overruns else 0
    source = str(tomllib.loads(args.figures.read_text()).get("source", "unknown"))
    text = render_budget(
        load_figures(args.figures),
        source,
        args.default_cpu_s,
        load_wall(args.figures),
        args.default_wall_s,
    )
    args.budget.write_text(text)
    print(f"wrote {args.budget}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
