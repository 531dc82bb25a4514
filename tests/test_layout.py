"""The layout by job (issue 14): no import cycle anywhere, and tuning_db importing nothing of tritonblas.

Imports are read from the source (module level and inside functions alike), so a cycle that only
closes at run time is caught too. tests/test_import.py checks the same of tuning_db at run time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tritonblas", "tuning_db")


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules `name` imports, anywhere in its source."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module
            # `from package import module` imports the module; `from module import name`, the module.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_anywhere():
    graph = _graph()
    assert "tritonblas.tuning.tuner" in graph and "tuning_db.store" in graph
    assert _cycles(graph) == []


def test_the_cycle_check_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_tuning_db_imports_no_tritonblas_module_in_its_source():
    graph = _graph()
    reached = {dep for name, deps in graph.items() if name.startswith("tuning_db") for dep in deps}
    assert not {d for d in reached if d.split(".")[0] == "tritonblas"}


def test_the_tuner_parts_import_only_those_before_them():
    order = ["space", "protocol", "benchmark", "tuner", "run"]
    graph = _graph()
    for i, part in enumerate(order):
        later = {f"tritonblas.tuning.{p}" for p in order[i + 1:]}
        assert not graph[f"tritonblas.tuning.{part}"] & later, part


def test_the_cli_is_only_commands():
    """The multi-GPU tuning run and the bench core are library code: no library module imports the CLI."""
    graph = _graph()
    for name, deps in graph.items():
        if not name.startswith("tritonblas.cli") and name != "tritonblas.__main__":
            assert not {d for d in deps if d.startswith("tritonblas.cli")}, name


def _layer_table() -> list[list[str]]:
    """The modules of each row of docs/architecture.md's layer table, bottom row first: `tuning_db/` is
    the package; `x/y.py` a module under tritonblas/, whose folder the row's next bare names share."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Layers, bottom up"):].split("\n## ")[0]
    rows = []
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or cells[1].strip() in ("job", "---"):
            continue
        folder, names = "", []
        for token in re.findall(r"`([^`]+)`", cells[2]):
            if token.endswith("/"):
                names.append(token.rstrip("/"))
                continue
            path, _, leaf = token.rpartition("/")
            folder = path if path else (folder if names else "")
            module = ".".join(["tritonblas", *filter(None, folder.split("/")), leaf.removesuffix(".py")])
            names.append(module.removesuffix(".__init__"))
        rows.append(names)
    return rows


def test_the_layer_table_of_the_architecture_doc_is_true():
    """Every module is in a row of the table and imports only modules of its own row or those before."""
    rows = _layer_table()

    def row_of(module: str) -> int | None:
        found = [i for i, names in enumerate(rows) for n in names
                 if module == n or module.startswith(n + ".")]
        return max(found) if found else None

    graph = _graph()
    placed = {n for names in rows for n in names}
    packages = {n.rsplit(".", 1)[0] for n in placed} | {"tritonblas", "tritonblas.__main__"}
    assert sorted(m for m in graph if row_of(m) is None and m not in packages) == []
    upward = sorted((m, d) for m, deps in graph.items() for d in deps
                    if d != "tritonblas" and row_of(m) is not None and row_of(d) > row_of(m))
    assert upward == []
