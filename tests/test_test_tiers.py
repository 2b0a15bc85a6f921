"""The `unit` tier (scripts/test.sh --quick) holds only tests that need no Spark, Kafka, JVM or
browser. Checked here by other means than tests/support/tiers.py, which applies the markers:
the imports of each unit test's module and function, its fixtures, its markers, and whether
this process has a Spark context or a JVM child when only unit tests were selected."""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

from tests.support.helpers import seeds

# Imports that reach a Spark session, a Kafka client, a browser or a test service. Pure pyspark
# modules (types, GroupState) are reached through tests.support.step_support and schemas.spark,
# which is allowed; a unit test module naming pyspark itself is not.
FORBIDDEN_IMPORTS = (
    "pyspark",
    "kafka",
    "delta",
    "playwright",
    "routelake_dev.kafka_local",
    "routing_lib.spark.session",
    "tests.support.spark_cluster",
    "tests.support.kafka_support",
    "tests.support.fault_support",
    "tests.support.s3_support",
    "tests.support.collector_support",
    "tests.support.process_support",
    "tests.support.broker_modes_support",
)
SERVICE_FIXTURES = {"spark", "backfill", "job", "kafka_bootstrap", "topic"}
JVM_COMMANDS = ("java",)  # a JVM's process name in /proc/<pid>/stat
OTHER_TIERS = ("spark", "kafka", "real_broker", "cluster", "s3", "browser", "integration")


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IMPORTS)


def _imported(nodes: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@cache
def _module_imports(path: Path) -> frozenset[str]:
    """What the module imports at its top level (not inside its other tests' functions)."""
    tree = ast.parse(path.read_text())
    top = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return frozenset(_imported(top))


@cache
def _function_imports(function: object) -> frozenset[str]:
    """What a test function imports itself (parametrized tests share one function)."""
    try:
        source = textwrap.dedent(inspect.getsource(function))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return frozenset()
    return frozenset(_imported(ast.parse(source).body))


def problems_of(item: pytest.Item) -> list[str]:
    found = [f"marked {m}" for m in OTHER_TIERS if item.get_closest_marker(m)]
    callspec = getattr(item, "callspec", None)
    parameters = set(callspec.params) if callspec is not None else set()
    fixtures = (set(getattr(item, "fixturenames", ())) - parameters) & SERVICE_FIXTURES
    found += [f"uses fixture {name}" for name in sorted(fixtures)]
    path = Path(str(item.fspath))
    imports = _module_imports(path) | _function_imports(getattr(item, "function", None))
    found += [f"imports {name}" for name in sorted(imports) if _forbidden(name)]
    return found


def test_unit_tests_use_no_spark_kafka_jvm_or_browser(request: pytest.FixtureRequest) -> None:
    unit = [item for item in request.session.items if item.get_closest_marker("unit")]
    assert request.node in unit  # this file is pure too
    wrong = {item.nodeid: problems for item in unit if (problems := problems_of(item))}
    assert wrong == {}


def test_every_test_has_a_tier(request: pytest.FixtureRequest) -> None:
    untiered = [
        item.nodeid
        for item in request.session.items
        if not any(item.get_closest_marker(m) for m in ("unit", "spark", "integration", "browser"))
    ]
    assert untiered == []
    both = [
        item.nodeid
        for item in request.session.items
        if item.get_closest_marker("unit")
        and any(item.get_closest_marker(m) for m in ("spark", "integration", "browser"))
    ]
    assert both == []


def test_the_guard_sees_a_spark_test_and_a_kafka_import() -> None:
    """The checks above can fail: a module importing kafka, a test using `spark`."""
    assert _forbidden("kafka.admin") and _forbidden("pyspark") and not _forbidden("kafkaesque")
    module = ast.parse("import os\nfrom kafka import KafkaConsumer\ndef test_x(): import delta\n")
    top = [n for n in module.body if not isinstance(n, ast.FunctionDef)]
    assert {n for n in _imported(top) if _forbidden(n)} == {"kafka", "kafka.KafkaConsumer"}
    assert "delta" in _imported(module.body)


def test_no_spark_context_or_jvm_when_only_unit_tests_run(
    request: pytest.FixtureRequest,
) -> None:
    """With `-m unit` nothing may have started Spark or a JVM in this session: the session's
    Spark context would still be up, a JVM child still running (fixtures outlive tests)."""
    items = request.session.items
    if not all(item.get_closest_marker("unit") for item in items):
        pytest.skip("other tiers are selected in this session: they may start Spark and JVMs")
    pyspark = sys.modules.get("pyspark")
    if pyspark is not None:
        assert pyspark.SparkContext._active_spark_context is None
    assert _java_descendants(os.getpid()) == []


def _java_descendants(root: int) -> list[int]:
    """Process ids of java processes under `root`, from /proc (Linux, as CI)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # the process has gone
        pid = int(stat.parent.name)
        names[pid] = text[text.index("(") + 1 : text.rindex(")")]
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(pid)
    found, pending = [], list(children.get(root, []))
    while pending:
        pid = pending.pop()
        if names.get(pid) in JVM_COMMANDS:
            found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def test_the_quick_tier_runs_fewer_seeds_only_when_asked(monkeypatch):
    monkeypatch.delenv("ROUTELAKE_TEST_SEEDS", raising=False)
    assert seeds(24) == range(24)
    monkeypatch.setenv("ROUTELAKE_TEST_SEEDS", "3")
    assert seeds(24) == range(3) and seeds(2) == range(2)
    assert seeds([3, 1, 2]) == [3, 1, 2] and seeds([5, 1, 2, 9]) == [5, 1, 2]
    monkeypatch.setenv("ROUTELAKE_TEST_SEEDS", "0")
    assert seeds(24) == range(1)  # a property test keeps one seed


def test_the_side_lane_lists_existing_test_modules_once():
    """scripts/test.sh runs these modules in a second pytest process and ignores them in the
    first: a wrong or stale path would run a module twice or not at all."""
    repo = Path(__file__).resolve().parents[1]
    lines = (repo / "tests" / "side_lane.txt").read_text().splitlines()
    modules = [line for line in lines if line.strip() and not line.startswith("#")]
    assert modules and len(modules) == len(set(modules))
    for module in modules:
        assert (repo / module).is_file() and Path(module).name.startswith("test_"), module
