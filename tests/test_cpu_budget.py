"""The per-module CPU and wall budgets (tests/support/cpu_budget.py): their arithmetic, the
meters, the waiting list, and pytest runs of its own that it fails when a module goes past its
CPU budget or its wall budget."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from tests.support import cpu_budget
from tests.support.cpu_budget import Budget, budget_for, check, wall_budget_for

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]


def test_budget_is_generous_for_small_and_large_modules():
    assert budget_for(10.0) == 50.0  # measured + 40 s
    assert budget_for(66.6) == 110.0  # 106.6, rounded up to 10
    assert budget_for(400.0) == 640.0  # 1.6 x measured
    assert budget_for(0.0) == 40.0


def test_wall_budget_is_wider_than_the_cpu_budget():
    assert wall_budget_for(10.0) == 70.0  # measured + 60 s
    assert wall_budget_for(100.0) == 160.0  # 160 = measured + 60 > 1.5 x measured
    assert wall_budget_for(321.0) == 490.0  # 481.5 (1.5 x measured), rounded up to 10
    assert wall_budget_for(0.0) == 60.0


def test_wall_overruns_name_the_module_its_wall_and_its_budget():
    wall = Budget(default_s=400.0, modules={"tests/test_a.py": 100.0}, unit="s wall")
    overruns = check({"tests/test_a.py": 130.25, "tests/test_b.py": 399.0}, wall)
    assert [str(o) for o in overruns] == [
        "tests/test_a.py: 130.2 s wall, over its wall budget of 100 s wall by 30.2"
    ]
    [new] = check({"tests/test_new.py": 450.0}, wall)
    assert str(new) == (
        "tests/test_new.py: 450.0 s wall, over the default wall budget (not in the file) of "
        "400 s wall by 50.0"
    )


def test_wall_scale_widens_only_the_wall_budgets(tmp_path):
    budget_file = tmp_path / "budget.toml"
    budget_file.write_text(
        'default_cpu_s = 300\ndefault_wall_s = 200\n[modules]\n"tests/test_a.py" = 50\n'
        '[wall]\n"tests/test_a.py" = 100\n'
    )
    assert cpu_budget.load_wall_budget(budget_file).of("tests/test_a.py") == 100.0
    scaled = cpu_budget.load_wall_budget(budget_file, cpu_budget.wall_scale({"X": "1"}))
    assert scaled.of("tests/test_a.py") == 100.0  # no variable: factor 1
    environ = {cpu_budget.WALL_SCALE_ENV: "2.5"}
    scaled = cpu_budget.load_wall_budget(budget_file, cpu_budget.wall_scale(environ))
    assert (scaled.of("tests/test_a.py"), scaled.of("tests/test_other.py")) == (250.0, 500.0)
    assert cpu_budget.load_budget(budget_file).of("tests/test_a.py") == 50.0
    with pytest.raises(ValueError, match="positive"):
        cpu_budget.wall_scale({cpu_budget.WALL_SCALE_ENV: "0"})


def test_waiting_is_wall_minus_cpu_most_first():
    cpu = {"tests/test_busy.py": 90.0, "tests/test_idle.py": 5.0, "tests/test_mid.py": 20.0}
    wall = {"tests/test_busy.py": 60.0, "tests/test_idle.py": 125.0, "tests/test_mid.py": 50.0}
    assert cpu_budget.waiting(cpu, wall) == [
        ("tests/test_idle.py", 120.0),
        ("tests/test_mid.py", 30.0),
        ("tests/test_busy.py", -30.0),  # both cores busy: less wall than CPU
    ]


def test_check_reports_only_modules_over_their_budget_or_the_default():
    budget = Budget(default_s=100.0, modules={"tests/test_a.py": 50.0, "tests/test_b.py": 200.0})
    figures = {"tests/test_a.py": 60.5, "tests/test_b.py": 150.0, "tests/test_new.py": 130.0}
    overruns = check(figures, budget)
    assert [(o.module, o.budget_s, o.listed) for o in overruns] == [
        ("tests/test_new.py", 100.0, False),
        ("tests/test_a.py", 50.0, True),
    ]
    assert str(overruns[1]) == ("tests/test_a.py: 60.5 CPU-s, over its budget of 50 CPU-s by 10.5")
    assert check({"tests/test_a.py": 50.0}, budget) == []  # at the budget is within it


def test_regenerated_budget_reads_back_with_headroom(tmp_path):
    figures = {"tests/test_a.py": 12.34, 'tests/odd "name".py': 500.0}
    figures_file = tmp_path / "figures.toml"
    figures_file.write_text(cpu_budget.render_figures(figures, "cgroup v1 cpuacct /x"))
    assert cpu_budget.load_figures(figures_file) == {**figures, "tests/test_a.py": 12.3}
    budget_file = tmp_path / "budget.toml"
    assert cpu_budget.main(["regenerate", str(figures_file), str(budget_file)]) == 0
    budget = cpu_budget.load_budget(budget_file)
    assert budget.modules == {"tests/test_a.py": 60.0, 'tests/odd "name".py': 800.0}
    assert budget.default_s == cpu_budget.DEFAULT_BUDGET_S
    assert "cgroup v1 cpuacct /x" in budget_file.read_text()
    assert cpu_budget.load_wall_budget(budget_file).modules == {}  # no wall figures, no [wall]


def test_regenerated_budget_has_wall_budgets_from_the_wall_figures(tmp_path):
    figures_file = tmp_path / "figures.toml"
    figures_file.write_text(
        cpu_budget.render_figures(
            {"tests/test_a.py": 12.0}, "cgroup v1 cpuacct /x", {"tests/test_a.py": 300.0}
        )
    )
    budget_file = tmp_path / "budget.toml"
    args = ["regenerate", str(figures_file), str(budget_file), "--default-wall-s", "500"]
    assert cpu_budget.main(args) == 0
    wall = cpu_budget.load_wall_budget(budget_file)
    assert (wall.modules, wall.default_s) == ({"tests/test_a.py": 450.0}, 500.0)
    assert cpu_budget.load_budget(budget_file).modules == {"tests/test_a.py": 60.0}


def test_committed_budget_file_loads_and_names_existing_modules():
    budget = cpu_budget.load_budget(ROOT / "tests" / "cpu_budget.toml")
    wall = cpu_budget.load_wall_budget(ROOT / "tests" / "cpu_budget.toml")
    assert budget.modules and wall.modules
    missing = [m for m in [*budget.modules, *wall.modules] if not (ROOT / m).is_file()]
    assert missing == []


def _burn(seconds: float) -> None:
    start = resource.getrusage(resource.RUSAGE_SELF)
    while True:
        now = resource.getrusage(resource.RUSAGE_SELF)
        if now.ru_utime + now.ru_stime - start.ru_utime - start.ru_stime >= seconds:
            return


def test_process_tree_meter_counts_this_process():
    before = cpu_budget.process_tree_cpu_s()
    _burn(0.2)
    assert cpu_budget.process_tree_cpu_s() - before >= 0.19


def test_cgroup_meter_reads_v1_and_v2_counters(tmp_path):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "cpuacct.usage").write_text("2500000000\n")
    (v2 / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    meter_v1, meter_v2 = cpu_budget.cgroup_meter(v1), cpu_budget.cgroup_meter(v2)
    assert meter_v1 is not None and meter_v1.read() == 2.5
    assert meter_v1.source.startswith("cgroup v1 cpuacct")
    assert meter_v2 is not None and meter_v2.read() == 1.5
    assert cpu_budget.cgroup_meter(tmp_path) is None  # neither counter: the tree is used
    assert cpu_budget.choose_meter({"ROUTELAKE_CPU_CGROUP": str(tmp_path)}).source.startswith(
        "process tree"
    )
    assert cpu_budget.choose_meter({"ROUTELAKE_CPU_CGROUP": str(v2)}).read() == 1.5


BUSY_MODULE = """
import resource

def test_busy():
    start = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    while resource.getrusage(resource.RUSAGE_SELF).ru_utime - start < {seconds}:
        pass
"""


def _run_with_budget(
    pytester: pytest.Pytester, budget_s: float, wall_budget_s: float = 1000
) -> pytest.RunResult:
    pytester.makepyfile(test_busy=BUSY_MODULE.format(seconds=0.2))
    budget = pytester.path / "budget.toml"
    budget.write_text(
        f'default_cpu_s = 1000\n[modules]\n"test_busy.py" = {budget_s}\n'
        f'[wall]\n"test_busy.py" = {wall_budget_s}\n'
    )
    figures = pytester.path / "figures.toml"
    result = pytester.runpytest_inprocess(
        "-p", "tests.support.cpu_budget", f"--cpu-budget={budget}", f"--cpu-figures={figures}"
    )
    assert cpu_budget.load_figures(figures)["test_busy.py"] >= 0.19
    return result


def test_run_fails_with_the_figures_when_a_module_exceeds_its_budget(pytester, monkeypatch):
    # the process tree is measured here, whatever the outer run uses; in the whole suite that
    # tree holds the session's Spark JVM too, so the figure may pass 1 CPU-s
    monkeypatch.delenv("ROUTELAKE_CPU_CGROUP", raising=False)
    result = _run_with_budget(pytester, budget_s=0.1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*BUDGET EXCEEDED by 1 module(s)*",
            "*test_busy.py: * CPU-s, over its budget of 0.1 CPU-s by *",
        ]
    )


def test_run_passes_within_budget(pytester, monkeypatch):
    # the process tree is measured here, whatever the outer run uses; the wall budget printed
    # is the file's, whatever factor the outer run was given
    monkeypatch.delenv("ROUTELAKE_CPU_CGROUP", raising=False)
    monkeypatch.delenv(cpu_budget.WALL_SCALE_ENV, raising=False)
    result = _run_with_budget(pytester, budget_s=60)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*CPU per test module*",
            "*test_busy.py (budget 60)*",
            "*waiting per test module (wall minus CPU)*",
            "*test_busy.py: * s wall, * CPU-s (wall budget 1000)",
        ]
    )
    assert "EXCEEDED" not in result.stdout.str()


def test_run_fails_with_the_wall_figure_when_a_module_exceeds_its_wall_budget(
    pytester, monkeypatch
):
    # 0.2 CPU-s take at least 0.2 s of wall time: past a 0.1 s wall budget, within the CPU one
    monkeypatch.delenv("ROUTELAKE_CPU_CGROUP", raising=False)
    monkeypatch.delenv(cpu_budget.WALL_SCALE_ENV, raising=False)
    result = _run_with_budget(pytester, budget_s=60, wall_budget_s=0.1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*BUDGET EXCEEDED by 1 module(s)*",
            "*test_busy.py: * s wall, over its wall budget of 0.1 s wall by *",
            f"wall budgets assume a machine running the suite alone (load average now * on *"
            f" cores); on a shared machine, {cpu_budget.WALL_SCALE_ENV}=N widens them N times",
        ]
    )
    assert "CPU-s, over" not in result.stdout.str()
    monkeypatch.setenv(cpu_budget.WALL_SCALE_ENV, "10000")  # a shared machine's factor
    assert _run_with_budget(pytester, budget_s=60, wall_budget_s=0.1).ret == pytest.ExitCode.OK


def test_figures_of_a_runs_parts_merge_into_one_file_adding_a_modules_parts(tmp_path):
    """The test command's parts (the unit tier, the lanes): a module with tests in two parts
    (unit and not) is the sum of its parts."""
    unit, lane = tmp_path / "unit.toml", tmp_path / "lane.toml"
    unit.write_text(
        cpu_budget.render_figures(
            {"tests/test_a.py": 12.5, "tests/test_mixed.py": 1.0},
            "cgroup a",
            {"tests/test_a.py": 30.0, "tests/test_mixed.py": 2.0},
        )
    )
    lane.write_text(
        cpu_budget.render_figures(
            {"tests/test_b.py": 2.0, "tests/test_mixed.py": 40.0},
            "cgroup b",
            {"tests/test_b.py": 4.0, "tests/test_mixed.py": 50.0},
        )
    )
    merged = tmp_path / "merged.toml"
    assert cpu_budget.main(["merge", str(unit), str(lane), "--output", str(merged)]) == 0
    assert cpu_budget.load_figures(merged) == {
        "tests/test_a.py": 12.5,
        "tests/test_b.py": 2.0,
        "tests/test_mixed.py": 41.0,
    }
    assert cpu_budget.load_wall(merged) == {
        "tests/test_a.py": 30.0,
        "tests/test_b.py": 4.0,
        "tests/test_mixed.py": 52.0,
    }
    assert 'source = "cgroup a; cgroup b"' in merged.read_text()


def test_check_fails_a_module_whose_parts_are_within_its_budget_but_not_their_sum(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv(cpu_budget.WALL_SCALE_ENV, raising=False)
    budget = tmp_path / "budget.toml"
    budget.write_text(
        'default_cpu_s = 300\ndefault_wall_s = 400\n[modules]\n"tests/test_mixed.py" = 30\n'
        '[wall]\n"tests/test_mixed.py" = 60\n'
    )
    parts = []
    for name, cpu_s, wall_s in (("unit", 20.0, 35.0), ("lane", 15.0, 20.0)):
        part = tmp_path / f"{name}.toml"
        part.write_text(
            cpu_budget.render_figures(
                {"tests/test_mixed.py": cpu_s}, name, {"tests/test_mixed.py": wall_s}
            )
        )
        assert cpu_budget.main(["check", str(part), str(budget)]) == 0  # each part within
        parts.append(str(part))
    merged = tmp_path / "merged.toml"
    assert cpu_budget.main(["merge", *parts, "--output", str(merged)]) == 0
    capsys.readouterr()
    assert cpu_budget.main(["check", str(merged), str(budget)]) == 1
    out = capsys.readouterr().out
    assert "35 CPU-s and 55 s of tests in 1 modules" in out
    assert "BUDGET EXCEEDED by 1 module(s) over the whole run" in out
    assert "tests/test_mixed.py: 35.0 CPU-s, over its budget of 30 CPU-s by 5.0" in out
    assert "wall budget" not in out  # 55 s of wall is within 60
    monkeypatch.setenv(cpu_budget.WALL_SCALE_ENV, "0.5")  # the wall budget halved: 30 s
    assert cpu_budget.main(["check", str(merged), str(budget)]) == 1
    assert "tests/test_mixed.py: 55.0 s wall, over its wall budget of 30 s wall by 25.0" in (
        capsys.readouterr().out
    )


@pytest.mark.subprocess  # pytest-xdist's workers are child Pythons
def test_xdist_workers_figures_reach_the_controller_added_up_per_module(pytester, monkeypatch):
    """The test command runs the unit tier under pytest-xdist: each worker measures its own
    tests and the controller writes and checks the sums."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import the plugin from here
    monkeypatch.delenv("ROUTELAKE_CPU_CGROUP", raising=False)
    busy = BUSY_MODULE.format(seconds=0.2)
    # two tests per module, so that both workers may run some of each module
    pytester.makepyfile(
        test_one=busy + busy.replace("test_busy", "test_busy_too"),
        test_two=busy + busy.replace("test_busy", "test_busy_too"),
    )
    budget = pytester.path / "budget.toml"
    budget.write_text('default_cpu_s = 1000\n[modules]\n"test_two.py" = 0.1\n')
    figures = pytester.path / "figures.toml"
    result = pytester.runpytest_subprocess(
        "-p",
        "tests.support.cpu_budget",
        f"--cpu-budget={budget}",
        f"--cpu-figures={figures}",
        "-n",
        "2",
        "-p",
        "xdist",
    )
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # test_two.py: 0.4 CPU-s of 0.1
    cpu, wall = cpu_budget.load_figures(figures), cpu_budget.load_wall(figures)
    assert set(cpu) == {"test_one.py", "test_two.py"}
    assert all(cpu[m] >= 0.39 and wall[m] >= cpu[m] - 0.05 for m in cpu), (cpu, wall)
    assert "pytest-xdist workers" in figures.read_text()
    result.stdout.fnmatch_lines(
        ["*BUDGET EXCEEDED by 1 module(s)*", "*test_two.py: * CPU-s, over its budget of 0.1*"]
    )
