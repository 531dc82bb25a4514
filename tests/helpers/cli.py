"""Inputs of the CLI tests."""

from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
TINY = str(DATA / "tiny.yaml")  # a shapes file of two tiny problems
