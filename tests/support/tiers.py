"""Test tiers, derived from what each test uses (applied by tests/conftest.py at collection).

A test needs a capability when a marker says so, when one of conftest's fixtures in its closure
provides it, or when its own code, its fixtures' code or the functions and classes under tests/
they name (followed transitively) start one: a Spark session, a process of their own (a JVM,
`routectl` in a child Python). Tiers follow:

- `unit`: needs nothing of the above; pure Python in this process (the quick tier);
- `spark`: a Spark session (the `spark` / `backfill` / `job` fixtures, or marked so);
- `integration`: Kafka, a real broker, a Spark cluster, S3, or a process of its own;
- `browser`: a real Chromium.

A test may carry `spark` together with `integration` or `browser`; `unit` excludes all others.
tests/test_test_tiers.py checks the `unit` tests independently of this module.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CONFTEST = TESTS / "conftest.py"

SPARK_FIXTURES = frozenset({"spark", "backfill", "job"})
KAFKA_FIXTURES = frozenset({"kafka_bootstrap", "topic"})
INTEGRATION_MARKERS = ("kafka", "real_broker", "cluster", "s3", "subprocess")

# Code (comments and docstrings left out) that builds a Spark session of its own or runs a job
# in-process (each builds one).
SPARK_SIGNS = re.compile(
    r"\bbuild_spark\b|\bSparkSession\.builder\b|\brun_route_state\b|\brun_backfill\b"
    r"|\bstart_query\b"
)
# Code that starts a process of its own: a child Python or JVM, spark-submit, the local Kafka
# broker, mqadmin (a JVM), the collector as a process. Quoted "java" is an argv element; the bare
# word also appears in the Java stack traces that pure tests parse.
PROCESS_SIGNS = re.compile(
    r"\bsubprocess\b|\bPopen\b|\bsys\.executable\b|[\"']java[\"']|spark-submit"
    r"|\bkafka_local\b|\bJavaProcess\b|\brun_mqadmin\w*|\bstart_collector\b|\bCluster\("
    r"|\brun_demo\b"
)
# Helpers that run a short-lived local tool, no server and no JVM: not followed.
ONE_SHOT_TOOLS = frozenset(
    {"tests.support.tls_support.make_tls_files"}  # openssl, about 0.2 s
)


def apply(items: Iterable[pytest.Item]) -> None:
    """Adds the derived capability markers, then `integration` or `unit` where due, so that
    `-m unit`, `-m spark`, `-m integration`, `-m browser` select by tier."""
    for item in items:
        for name in capabilities(item):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        if any(item.get_closest_marker(m) for m in INTEGRATION_MARKERS):
            item.add_marker("integration")
        elif not any(item.get_closest_marker(m) for m in ("spark", "browser")):
            item.add_marker("unit")


def capabilities(item: pytest.Item) -> set[str]:
    """The markers `item` needs beyond those it carries: spark, kafka, subprocess."""
    needs: set[str] = set()
    fixtures = conftest_fixtures(item)
    if fixtures & SPARK_FIXTURES:
        needs.add("spark")
    if fixtures & KAFKA_FIXTURES:
        needs.add("kafka")
    for root in _roots(item):
        needs |= _needs_of(root)
    return needs


def conftest_fixtures(item: pytest.Item) -> set[str]:
    """Names of tests/conftest.py's fixtures in item's closure (a parameter named `job` or a
    module's own `spark` fixture is not conftest's)."""
    info = getattr(item, "_fixtureinfo", None)
    return {
        name
        for name, defs in getattr(info, "name2fixturedefs", {}).items()
        if any(_defined_in(getattr(d, "func", None), CONFTEST) for d in defs)
    }


def own_code(item: pytest.Item) -> list[Callable[..., object]]:
    """The test function, the fixtures of its closure defined under tests/, and the functions
    and classes defined under tests/ they name (followed transitively)."""
    found: dict[int, Callable[..., object]] = {}
    for root in _roots(item):
        found.update((id(obj), obj) for obj in _reached(root))
    return list(found.values())


def _roots(item: pytest.Item) -> list[Callable[..., object]]:
    roots: list[Callable[..., object]] = []
    function = getattr(item, "function", None)
    if function is not None:
        roots.append(function)
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        for fixture in defs:
            func = getattr(fixture, "func", None)
            # conftest's fixtures are judged by name (`config` starts nothing)
            if func is not None and _under_tests(func) and not _defined_in(func, CONFTEST):
                roots.append(func)
    return roots


@cache
def _needs_of(root: Callable[..., object]) -> frozenset[str]:
    """What root's code and the code it reaches start (cached: parametrized tests share it)."""
    code = [_code_text(obj) for obj in _reached(root)]
    needs = set()
    if any(SPARK_SIGNS.search(text) for text in code):
        needs.add("spark")
    if any(PROCESS_SIGNS.search(text) for text in code):
        needs.add("subprocess")
    return frozenset(needs)


def _reached(root: Callable[..., object]) -> list[Callable[..., object]]:
    seen: dict[int, Callable[..., object]] = {}
    pending = [root]
    while pending:
        obj = pending.pop()
        if id(obj) in seen or _qualified(obj) in ONE_SHOT_TOOLS:
            continue
        seen[id(obj)] = obj
        pending.extend(_callees(obj))
    return list(seen.values())


@cache
def _code_text(obj: Callable[..., object]) -> str:
    """obj's source without comments and docstrings (which may name what they do not run)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError):
        return ""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    return ast.unparse(tree)


@cache
def _source_file(obj: object) -> Path | None:
    code = getattr(obj, "__code__", None)
    if code is not None:  # a function: its code object knows (inspect would search)
        return Path(code.co_filename).resolve()
    try:
        file = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    except TypeError:
        return None
    return Path(file).resolve() if file else None


def _under_tests(obj: object) -> bool:
    file = _source_file(obj)
    return file is not None and file.is_relative_to(TESTS)


def _defined_in(obj: object, path: Path) -> bool:
    return obj is not None and _source_file(obj) == path


def _qualified(obj: object) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


@cache
def _callees(obj: Callable[..., object]) -> list[Callable[..., object]]:
    """Functions and classes defined under tests/ that obj's code names in its module."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    code = getattr(inspect.unwrap(obj), "__code__", None)
    if module is None or (code is None and not inspect.isclass(obj)):
        return []
    names: set[str] = set()
    if code is not None:
        names = _names(code)
    else:  # a class: the names its methods use
        for member in vars(obj).values():
            if isinstance(member, types.FunctionType):
                names |= _names(member.__code__)
    found: list[Callable[..., object]] = []
    for name in names:
        target = getattr(module, name, None)
        if callable(target):
            target = inspect.unwrap(target)  # a @contextmanager's code is the test module's
        if (inspect.isfunction(target) or inspect.isclass(target)) and _under_tests(target):
            found.append(target)
    return found


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names
