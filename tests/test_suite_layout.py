"""The suite's own layout (issue 35): test modules share helpers through tests/helpers/ and fixtures
through tests/conftest.py, never by importing one another (a test module imported elsewhere runs its
autouse fixtures and module set-up there too, and its tests can be called from outside pytest)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_module_of_the_suite_imports_a_test_module():
    found = {f"{p.relative_to(TESTS)}: {name}" for p in TESTS.rglob("*.py") for name in _imported(p)
             if name.split(".")[-1].startswith("test_") or name == "conftest"}
    assert sorted(found) == []


def test_helpers_are_not_named_like_test_modules():
    assert [p.name for p in (TESTS / "helpers").glob("test*.py")] == []
