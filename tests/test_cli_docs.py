"""What the docs say of the command line and of the shipped file is what they are: docs/cli.md's reference
is the commands' `--help` (scripts/cli_reference.py writes it), and the README's count of shipped winners
is configs/sm_90.json's."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _reference_script():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sections(doc: str) -> dict[str, str]:
    """The reference's `### `tritonblas ...`` sections by title."""
    return dict(re.findall(r"^### `(tritonblas[^`]*)`\n\n```text\n(.*?)\n```", doc, re.S | re.M))


def test_every_command_and_option_is_in_the_reference():
    """Under any typer and rich (the layout may differ): each command has its section, with the options
    its --help lists."""
    ref = _reference_script()
    sections = _sections(ref.DOC.read_text())
    for path in ref.command_paths():
        title = " ".join(["tritonblas", *path])
        assert title in sections, f"docs/cli.md has no {title}: run python scripts/cli_reference.py"
        options = set(re.findall(r"--[a-z][a-z-]*", ref.help_text(path)))
        assert options == set(re.findall(r"--[a-z][a-z-]*", sections[title])), title


def test_the_reference_is_the_help_as_it_is_now():
    """Byte for byte, under the typer and rich the reference was written with."""
    ref = _reference_script()
    doc = ref.DOC.read_text()
    written = re.search(r"from --help \(([^)]*)\)", doc)
    assert written, "docs/cli.md's reference names no typer and rich versions"
    if written.group(1) != ref.versions():
        pytest.skip(f"docs/cli.md's reference was written under {written.group(1)}; here: {ref.versions()} "
                    "(the other test checks its commands and options)")
    assert ref.render(doc) == doc, "docs/cli.md is out of date: run python scripts/cli_reference.py"


def test_the_generator_refuses_a_page_without_its_markers():
    with pytest.raises(ValueError, match="no reference part"):
        _reference_script().render("# cli\n")


def test_the_readme_counts_the_shipped_winners_and_torch_picks():
    """The README's "`configs/sm_90.json` ships N winners ... (T of them torch's op) and ... (U torch's op)"
    against the file: N its entries, T + U those whose config is torch's op."""
    text = " ".join((ROOT / "README.md").read_text().split())
    shipped = re.search(r"configs/sm_90\.json`? ships ([\d,]+) (?:winners|entries)", text)
    torch_picks = re.findall(r"(\d[\d,]*) (?:of them )?torch's op", text)
    assert shipped and torch_picks, "the README no longer says how many winners configs/sm_90.json ships"
    entries = json.loads((ROOT / "configs" / "sm_90.json").read_text())["entries"]
    torch_entries = sum(e["config"].get("backend") == "torch" for e in entries)
    said = (int(shipped.group(1).replace(",", "")), sum(int(t.replace(",", "")) for t in torch_picks))
    assert said == (len(entries), torch_entries), \
        f"README: {said[0]} winners, {said[1]} torch.mm; configs/sm_90.json: {len(entries)}, {torch_entries}"
