"""The repository speaks of the product: a report of bounded size, no development log in the text, no
link that leaves the repository or points nowhere, and no name in docs/architecture.md that the code no
longer has. Each checker is a function of text; the unit tests below feed each a bad sample, so every
check is known to fail when it should."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "docs" / "benchmarks"
MAX_BENCHMARK_FILES = 30
MAX_REPORT_LINES = 410
PACKAGES = ("tritonblas", "tuning_db")

_ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
             r"\w+teenth|twentieth|thirtieth|fortieth|fiftieth")
_TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
# Development rounds numbered: a session or stop and its number, file and branch names carrying a
# round's number after a hyphen, an ordinal before "session" or "stop", and compound ordinals, which only
# a count of rounds of work reaches in this repository (the unit tests below spell out samples).
ROUND_PATTERNS = (
    re.compile(r"\bsessions? \d+", re.I),
    re.compile(r"\bstops? \d+\b", re.I),
    re.compile(r"-s[1-9]\d\b"),
    re.compile(rf"\b(?:{_ORDINALS})(?:'s)? (?:session|stop)s?\b", re.I),
    re.compile(rf"\b(?:{_TENS})-(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)\b", re.I),
)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*\.(?:py|cpp|h|md|json|yaml|sh|txt)")
# Names of other libraries the doc writes in backticks (torch.mm, F.linear, tl.dot, at::...).
_FOREIGN = {"torch", "F", "nn", "triton", "tl", "np", "numpy", "os", "sys", "typing", "functools",
            "logging", "pytest", "sqlalchemy", "pydantic", "typer", "ctypes", "threading", "CompiledKernel"}


def tracked_files() -> list[Path]:
    """The repository's files: git's list where there is one, else the tree without hidden folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        return [Path(d) / f for d, dirs, files in os.walk(ROOT)
                if not (dirs.__setitem__(slice(None), [x for x in dirs if not x.startswith(".")
                                                       and x != "__pycache__"]))
                for f in files]


def text_files() -> list[Path]:
    """Tracked text files, less JSON data (measurements, shipped configs) and binaries."""
    found = []
    for path in tracked_files():
        if path.suffix == ".json" or not path.is_file():
            continue
        head = path.read_bytes()[:8192]
        if b"\0" not in head:
            found.append(path)
    return found


def over_limits(folder: Path) -> list[str]:
    """What of the benchmarks folder `folder` is past its limits: the file count, the report's lines, raw
    files the report does not cite."""
    found = []
    count = sum(1 for _ in folder.iterdir())
    if count > MAX_BENCHMARK_FILES:
        found.append(f"{count} files (at most {MAX_BENCHMARK_FILES})")
    report = (folder / "h200.md").read_text()
    lines = len(report.splitlines())
    if lines > MAX_REPORT_LINES:
        found.append(f"h200.md: {lines} lines (at most {MAX_REPORT_LINES})")
    # a raw file stays only while the report cites it (superseded figures leave; git keeps them)
    found += [f"{p.name}: not cited by h200.md" for p in sorted(folder.iterdir())
              if p.name != "h200.md" and p.name not in report]
    return found


def round_mentions(text: str) -> list[str]:
    """Each line of `text` that numbers a development round, session or stop."""
    return [line.strip() for line in text.splitlines() if any(p.search(line) for p in ROUND_PATTERNS)]


def bad_links(text: str, source: Path, root: Path = ROOT) -> list[str]:
    """Markdown links of `text` (a file at `source`) that leave `root` or name a file that does not exist."""
    bad = []
    for target in _LINK.findall(re.sub(r"`[^`\n]*`", "", text)):  # code spans hold no links
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the same page
        path = (source.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(root.resolve()):
            bad.append(f"{target} (outside the repository)")
        elif not path.exists():
            bad.append(f"{target} (no such file)")
    return bad


_UP_PATH = re.compile(r"(?<![\w./])(?:\.\./)+[\w.-]+(?:/[\w.-]+)*")


def escaping_paths(text: str, source: Path, root: Path = ROOT) -> list[str]:
    """Paths of `text` (a file at `source`) that climb with ../ out of `root`, or to nothing there, read
    from the file's folder and from the root alike (a command line is run from the root)."""
    bad = []
    for token in _UP_PATH.findall(text):
        places = [(base / token).resolve() for base in (source.parent, root)]
        if not any(p.is_relative_to(root.resolve()) and p.exists() for p in places):
            bad.append(token)
    return bad


@cache
def code_names(root: Path = ROOT) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per module of PACKAGES (dotted), the names it defines or imports; per class name, its members
    (methods, class-level and `self.` attributes). Lazy exports of a package (string keys of a dict
    literal in its __init__.py) count as its names."""
    modules: dict[str, set[str]] = {}
    classes: dict[str, set[str]] = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names = modules.setdefault(".".join(parts), set())
            tree = ast.parse(path.read_text())
            for node in tree.body:
                names.update(_bound(node, path.name == "__init__.py"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    members = classes.setdefault(node.name, set())
                    for item in node.body:
                        members.update(_bound(item, False))
                    members.update(t.attr for sub in ast.walk(node) if isinstance(sub, ast.Assign)
                                   for t in sub.targets if isinstance(t, ast.Attribute)
                                   and isinstance(t.value, ast.Name) and t.value.id == "self")
    return modules, classes


def _bound(node: ast.stmt, lazy: bool) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        names = {t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        if lazy and isinstance(node.value, ast.Dict):
            names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        return names
    return set()


def _name_exists(dotted: str, root: Path) -> bool:
    modules, classes = code_names(root)
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        suffix, rest = ".".join(parts[:cut]), parts[cut:]
        for module, names in modules.items():
            if module != suffix and not module.endswith("." + suffix):
                continue
            if not rest or (rest[0] in names and (len(rest) == 1 or rest[1] in classes.get(rest[0], ()))):
                return True
    return parts[0] in classes and (len(parts) == 1 or parts[1] in classes[parts[0]])


def stale_names(text: str, root: Path = ROOT) -> list[str]:
    """Names in backticks in `text` that the code does not have: `module.name` (a module under
    PACKAGES, by the end of its dotted path, then a name it defines, then one member of that class) or
    `Class.member`, and `path/file.py` (relative to the root or a package, or a file name anywhere)."""
    stale = []
    files = {p.name for p in tracked_files()}
    for token in re.findall(r"`([^`\n]+)`", text):
        if _PATH.fullmatch(token):
            if not (token in files or any((base / token).exists() for base in
                                          (root, *(root / p for p in PACKAGES), root / "scripts"))):
                stale.append(token)
        elif _DOTTED.fullmatch(token) and token.split(".")[0] not in _FOREIGN:
            if not _name_exists(token, root):
                stale.append(token)
    return stale


# --- the repository ---------------------------------------------------------------------------------


def test_docs_benchmarks_holds_at_most_30_files_each_cited_by_a_short_report():
    assert over_limits(BENCHMARKS) == []


@pytest.mark.parametrize("path", text_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_text_numbers_development_rounds(path):
    assert round_mentions(path.read_text(errors="replace")) == []


@pytest.mark.parametrize("path", [p for p in text_files() if p.suffix == ".md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_stay_in_the_repository_and_resolve(path):
    assert bad_links(path.read_text(), path) == []


@pytest.mark.parametrize("path", text_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_path_climbs_out_of_the_repository(path):
    assert escaping_paths(path.read_text(errors="replace"), path) == []


def test_names_in_the_architecture_doc_exist():
    assert stale_names((ROOT / "docs" / "architecture.md").read_text()) == []


# --- each checker fails on a bad sample ---------------------------------------------------------------

_S = "s" + "ession"  # spelled apart so that this file passes its own check


@pytest.mark.parametrize("sample", [
    f"measured in {_S} 12", "docs/benchmarks/h200-" + "s47-models.json", "branch probes-" + "s45",
    f"the twelfth {_S}", f"the forty-{'seventh'} {_S}'s run", "see st" + "op 42's profile",
    "the forty-" + "sixth's calls",
])
def test_round_mentions_finds_a_numbered_round(sample):
    assert round_mentions(f"fine line\n{sample}\n") == [sample]


@pytest.mark.parametrize("sample", [
    "a pytest fixture of scope session", "two rounds of three processes", "the first row, s5 stages",
    "stop the run", "SK 128x128x64 w4 s5", "the twenty first", "round 0 on an empty database",
])
def test_round_mentions_leaves_product_text_alone(sample):
    assert round_mentions(sample) == []


def test_bad_links_finds_links_outside_and_missing(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("x")
    source = tmp_path / "docs" / "page.md"
    out = ".." + "/../shared/device/x.sh"  # spelled apart so that this file passes its own check
    text = f"[ok](there.md) [anchor](#top) [web](https://example.com) [out]({out}) [gone](missing.md#part)"
    assert bad_links(text, source, tmp_path) == [f"{out} (outside the repository)",
                                                 "missing.md#part (no such file)"]


def test_escaping_paths_finds_paths_out_of_the_repository(tmp_path):
    (tmp_path / "docs" / "notes").mkdir(parents=True)
    (tmp_path / "docs" / "notes" / "x.md").write_text("x")
    source = tmp_path / "docs" / "benchmarks" / "page.md"
    up = ".."  # spelled apart so that this file passes its own check
    text = (f"see {up}/notes/x.md, run `bash {up}/shared/device/prepare.sh` or {up}/{up}/{up}/etc/passwd; "
            "a/../b stays")
    assert escaping_paths(text, source, tmp_path) == [f"{up}/shared/device/prepare.sh",
                                                      f"{up}/{up}/{up}/etc/passwd"]


def test_stale_names_finds_names_the_code_lacks():
    text = ("`call.path.signature` `call.path.no_such_function` `caches.invalidate` `Plan.eager_vendor` "
            "`Plan.no_such_member` `launch/prepared.py` `launch/no_such.py` `torch.mm` `tuning_db.TuningDB` "
            "`tritonblas.matmul` `tritonblas.no_such_op`")
    assert stale_names(text) == ["call.path.no_such_function", "Plan.no_such_member", "launch/no_such.py",
                                 "tritonblas.no_such_op"]


def test_over_limits_finds_too_many_files_and_a_long_report(tmp_path):
    names = [f"h200-f{i}.json" for i in range(MAX_BENCHMARK_FILES - 1)]
    for name in names:
        (tmp_path / name).write_text("{}")
    (tmp_path / "h200.md").write_text(" ".join(names) + "\n" * MAX_REPORT_LINES)
    assert over_limits(tmp_path) == []
    (tmp_path / "h200.md").write_text(" ".join(names) + "\n" * (MAX_REPORT_LINES + 1))
    (tmp_path / "h200-one-more.json").write_text("{}")
    assert over_limits(tmp_path) == [f"{MAX_BENCHMARK_FILES + 1} files (at most {MAX_BENCHMARK_FILES})",
                                     f"h200.md: {MAX_REPORT_LINES + 1} lines (at most {MAX_REPORT_LINES})",
                                     "h200-one-more.json: not cited by h200.md"]
