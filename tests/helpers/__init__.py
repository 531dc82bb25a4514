"""Helpers the test modules share (no tests here): test modules import these, never each other.

Fixtures used by several modules are in tests/conftest.py.
"""
