"""Inputs of the CLI tests, and how they read a failed command."""

from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
TINY = str(DATA / "tiny.yaml")  # a shapes file of two tiny problems


def one_line_error(result, code: int = 2) -> str:
    """The command failed with `code`, one line on stderr and no traceback; that line."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]
