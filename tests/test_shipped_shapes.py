"""The shapes files the shipped configs must cover (scripts/shipped_shapes.txt, read by .ci/run), the
problem classes (scripts/classes/), and several --shapes files in one command."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from tritonblas.cli import app
from tritonblas.cli.common import problems_from
from tritonblas.shapes import load_grouped, load_problems

ROOT = Path(__file__).resolve().parent.parent
CLASSES = sorted((ROOT / "scripts" / "classes").glob("*.yaml"))
# Class files of grouped GEMMs only: tests/test_grouped_shipped.py gates their shipped winners
# (configs/grouped/<arch>.json), not db check.
GROUPED_CLASSES = [c for c in CLASSES if load_grouped(c) and not load_problems(c)]


def listed(text: str) -> list[str]:
    """The files a shipped_shapes.txt names, as .ci/run reads it (comments and blank lines dropped)."""
    return [line for line in (re.sub(r"#.*", "", raw).rstrip() for raw in text.splitlines()) if line]


def test_shipped_shapes_list_names_valid_files():
    text = (ROOT / "scripts" / "shipped_shapes.txt").read_text()
    files = listed(text)
    assert "scripts/shapes.yaml" in files
    for f in files:
        assert load_problems(ROOT / f), f
    # Every class file of dense problems is listed, switched on or (until a tuning run covers it)
    # commented out.
    for c in set(CLASSES) - set(GROUPED_CLASSES):
        assert f"scripts/classes/{c.name}" in text, c.name


def test_class_files_parse_and_are_described():
    readme = (ROOT / "scripts" / "classes" / "README.md").read_text()
    assert {c.name for c in CLASSES} >= {"linear.yaml", "backward.yaml"}
    for c in CLASSES:
        assert (load_grouped(c) if c in GROUPED_CLASSES else load_problems(c)) and c.name in readme
    linear = load_problems(ROOT / "scripts" / "classes" / "linear.yaml")
    assert {(p.layout, p.bias) for p in linear} == {("nt", "row")}


def test_several_shapes_files_are_one_list_each_problem_once(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("shapes:\n  - {m: 16, n: 64, k: 32}\n  - {m: 32, n: 64, k: 32}\n")
    b.write_text("shapes:\n  - {m: 32, n: 64, k: 32}\n  - {m: 8, n: 8, k: 8, layout: nt, bias: row}\n")
    got = problems_from([a, b], None)
    assert [(p.m, p.layout, p.bias) for p in got] == [(16, "nn", "none"), (32, "nn", "none"),
                                                      (8, "nt", "row")]
    assert problems_from(a, "fp16")[0].dtype == "fp16"
    result = CliRunner().invoke(app, ["db", "check", "--shapes", str(a), "--shapes", str(b), "--file",
                                      str(tmp_path / "missing.json")])
    assert "cannot read config file" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("shapes:\n  - {m: 0, n: 1, k: 1}\n")
    result = CliRunner().invoke(app, ["db", "check", "--shapes", str(a), "--shapes", str(bad), "--file",
                                      str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "bad.yaml" in result.output and "shapes entry 1" in result.output
