"""No module of tritonblas uses another module's private names: what one module offers the
others has a public name in it, so a private one can be renamed or removed by reading one file.

Read from the source (module level and inside functions alike): `from <module> import _name`, and
`<module>._name` where <module> is a name bound to a tritonblas module by an import. A module's own
private names, and those of third-party packages (torch, triton), are not this test's concern. The tree
checked is the `tritonblas` that imports: `PYTHONPATH=<tree> python -m pytest <this file>`, run from
outside this checkout, checks another (9dbf350's tree fails it with 17 names).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tritonblas

PACKAGE = Path(tritonblas.__file__).resolve().parent


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package by its __init__.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["tritonblas", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _absolute(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The module an ImportFrom names, as an absolute dotted name."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, *filter(None, [node.module])])


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` of Name/Attribute chains, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _uses(name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """'<name>: <other module>.<private name>' for each private name of another module `name` uses."""
    tree = ast.parse(path.read_text(), str(path))
    bound: dict[str, str] = {}  # a local name -> the tritonblas module an import binds it to
    found = []

    def flag(module: str, attr: str) -> None:
        if module != name and _private(attr):
            found.append(f"{name}: {module}.{attr}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "tritonblas":
                    continue
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:  # `import tritonblas.x.y` binds `tritonblas`; its attributes resolve below
                    bound["tritonblas"] = "tritonblas"
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, name, path)
            if source.split(".")[0] != "tritonblas":
                continue
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if target in modules:  # `from package import module`
                    bound[alias.asname or alias.name] = target
                    if _private(alias.name):
                        flag(source, alias.name)
                else:
                    flag(source, alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            head = _dotted(node.value)
            if head is None:
                continue
            first, _, rest = head.partition(".")
            if first not in bound:
                continue
            module = ".".join(filter(None, [bound[first], rest]))
            if module in modules:
                flag(module, node.attr)
    return found


def test_a_module_uses_no_private_name_of_another():
    modules = _modules()
    found = sorted({use for name, path in modules.items() for use in _uses(name, path, modules)})
    assert found == [], "private names used across modules (give them a public name):\n" + "\n".join(found)


def test_the_check_sees_both_forms(tmp_path):
    """The scan catches an imported private name and an attribute of an imported module, not a
    module's own private names nor a third-party package's."""
    modules = {"tritonblas.a": tmp_path / "a.py", "tritonblas.b": tmp_path / "b.py"}
    source = ("from . import b\nfrom .b import _x, y\nimport torch\nimport tritonblas.b as bee\n"
              "def _own():\n    return b._z, bee._w, b.ok, torch._C, _own\n")
    modules["tritonblas.a"].write_text(source)
    assert sorted(_uses("tritonblas.a", modules["tritonblas.a"], modules)) == [
        "tritonblas.a: tritonblas.b._w", "tritonblas.a: tritonblas.b._x", "tritonblas.a: tritonblas.b._z"]
