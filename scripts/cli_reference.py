"""Write the reference part of docs/cli.md from the commands' own `--help`, so the two cannot drift.

The part between the BEGIN and END markers is the exit codes (tritonblas.cli.common.EXIT_CODES) and the
`--help` of every command, `tritonblas` and `tritonblas db` included, as typer renders it at 100 columns;
the prose around it is written by hand and kept as it is. The help's layout is typer's and rich's, so the
marker names their versions: tests/test_cli_reference.py regenerates the part under those versions and
fails on any difference.

    python scripts/cli_reference.py            # rewrite docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 if docs/cli.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
BEGIN = "<!-- BEGIN cli reference: written by scripts/cli_reference.py from --help"
END = "<!-- END cli reference -->"
WIDTH = 100


def versions() -> str:
    """What the help's layout depends on, as the BEGIN marker records it."""
    return ", ".join(f"{name} {metadata.version(name)}" for name in ("typer", "rich"))


def command_paths() -> list[list[str]]:
    """Every command and group below `tritonblas`, in the order its help lists them ([] is itself)."""
    import typer

    from tritonblas.cli import app

    paths: list[list[str]] = []

    def walk(cmd, path: list[str]) -> None:
        paths.append(path)
        if hasattr(cmd, "list_commands"):
            ctx = typer.Context(cmd, info_name=path[-1] if path else "tritonblas")
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def help_text(path: list[str]) -> str:
    """`tritonblas <path> --help` at WIDTH columns, without trailing blanks."""
    from typer.testing import CliRunner

    from tritonblas.cli import app

    result = CliRunner().invoke(app, [*path, "--help"], prog_name="tritonblas",
                                env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)})
    if result.exit_code != 0:
        raise RuntimeError(f"tritonblas {' '.join(path)} --help exited {result.exit_code}: {result.output}")
    return "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")


def reference() -> str:
    """The generated part, markers included."""
    from tritonblas.cli.common import EXIT_CODES

    parts = [f"{BEGIN} ({versions()}); do not edit by hand -->", "", "### Exit codes", "",
             "| code | meaning |", "| --- | --- |"]
    parts += [f"| {code} | {text} |" for code, text in EXIT_CODES.items()]
    for path in command_paths():
        parts += ["", f"### `{' '.join(['tritonblas', *path])}`", "", "```text", help_text(path), "```"]
    return "\n".join([*parts, "", END])


def render(doc: str) -> str:
    """`doc` with its reference part (BEGIN to END) written anew; a ValueError without the markers."""
    start, stop = doc.find(BEGIN), doc.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"{DOC} has no reference part: add the lines {BEGIN} ... --> and {END}")
    return doc[:start] + reference() + doc[stop + len(END):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is out of date")
    args = parser.parse_args(argv)
    old = DOC.read_text()
    new = render(old)
    if args.check:
        if new != old:
            print(f"{DOC} is out of date: run python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        DOC.write_text(new)
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
