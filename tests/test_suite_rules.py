"""Rules about the suite itself: every test checks something, and the fast tier stays free of
the model (conftest.py marks model tests slow and refuses a model load in any other test)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PYTEST_CHECKS = {"raises", "fail", "warns", "deprecated_call"}


def _called_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _is_fuzz(fn: ast.FunctionDef) -> bool:
    """A hypothesis test (``@given``): not raising on any input is its check."""
    return any(_called_name(d) == "given" for d in fn.decorator_list if isinstance(d, ast.Call))


def _modules(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _vacuous(test: ast.expr, modules: set[str]) -> bool:
    """``assert True``, ``assert "text"``, ``assert np is not None``: true whatever the code does."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    return (isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.IsNot) and len(test.ops) == 1
            and isinstance(test.left, ast.Name) and test.left.id in modules
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)


def _checks(fn: ast.FunctionDef, modules: set[str]) -> bool:
    """An assert that can fail, pytest.raises/fail/warns, or a helper named ``*assert*``
    (``assert_same``, ``_assert_eval_measures``, a mock's ``assert_called_once``)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert) and not _vacuous(node.test, modules):
            return True
        if isinstance(node, ast.Call):
            name = _called_name(node)
            if "assert" in name.lower():
                return True
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "pytest" and name in PYTEST_CHECKS:
                return True
    return False


def unchecked_tests(folder: Path = TESTS) -> list[str]:
    out = []
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = _modules(tree)
        for node in ast.walk(tree):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
                    and not _is_fuzz(node) and not _checks(node, modules)):
                out.append(f"{path.name}:{node.lineno} {node.name}")
    return out


def test_every_test_outside_the_fuzz_tests_checks_something():
    assert unchecked_tests() == []


def test_the_scan_finds_a_test_without_a_check(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import numpy as np\nimport pytest\nfrom hypothesis import given\n"
        "def test_runs():\n    print(1)\n"
        "def test_vacuous():\n    assert np is not None\n    assert True\n"
        "def test_checks():\n    assert 1 + 1 == 2\n"
        "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n"
        "def test_helper():\n    assert_same(1, 1)\n"
        "@given(None)\ndef test_fuzz(x):\n    parse(x)\n", encoding="utf-8")
    assert unchecked_tests(tmp_path) == ["test_x.py:4 test_runs", "test_x.py:6 test_vacuous"]


def test_model_tests_are_marked_slow_by_fixture(request):
    """Every collected test on a model fixture carries the slow mark (conftest adds it); this
    test uses none and is fast."""
    from .conftest import MODEL_FIXTURES

    assert MODEL_FIXTURES >= {"embedder", "three_retrievers"}
    on_a_model = [it for it in request.session.items
                  if {"embedder", "sample_store", "retriever", "three_retrievers"} & set(it.fixturenames)]
    assert [it.nodeid for it in on_a_model if not it.get_closest_marker("slow")] == []
    assert request.node.get_closest_marker("slow") is None


def test_a_fast_test_cannot_load_the_model(request):
    from kbtool.embed import load_embedder

    from .conftest import REFUSED_LOADS

    with pytest.raises(AssertionError, match="not marked slow"):
        load_embedder()
    with pytest.raises(AssertionError, match="not marked slow"):
        load_embedder("use-m")
    # recorded as well, so a caller catching the error still fails the test at teardown
    assert len(request.node.stash[REFUSED_LOADS]) == 2
    request.node.stash[REFUSED_LOADS].clear()
    assert load_embedder("openai:http://127.0.0.1:9/v1#x").spec.backend == "http"  # an endpoint: no load
