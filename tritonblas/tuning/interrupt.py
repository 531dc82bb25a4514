"""Ctrl-C during a tuning run, taken where it is safe.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Once it landed in a
garbage-collection callback of SQLAlchemy's ("Exception ignored in: <function _collection_gced ...>"),
where Python prints it and carries on: the run went on to the end and exited 0 (issue 33). So while a
run is on (`deferred`), the first Ctrl-C only sets a flag, which the run checks between candidates and
between problems (`check` raises KeyboardInterrupt there), and a second raises at once. Worker
processes ignore SIGINT (a terminal sends it to them too) and stop when the parent sets the event they
were given (`in_worker`): only the parent decides.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class _Flag(Protocol):
    def is_set(self) -> bool: ...


_requested = threading.Event()
_shared: list[_Flag] = []  # a worker's event, set by its parent
_NOTICE = b"\ntritonblas: Ctrl-C: stopping after the current candidate (Ctrl-C again to stop now)\n"


def requested() -> bool:
    return _requested.is_set() or any(flag.is_set() for flag in _shared)


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed (or the parent said stop) since the run began."""
    if requested():
        raise KeyboardInterrupt("tuning interrupted")


def _on_sigint(signum, frame) -> None:
    if _requested.is_set():
        raise KeyboardInterrupt
    _requested.set()
    os.write(2, _NOTICE)  # (no print: a handler may run inside another write to the console)


@contextmanager
def deferred() -> Iterator[None]:
    """Within: the first Ctrl-C sets the flag `check` reads, a second raises KeyboardInterrupt. After,
    the flag is down and the previous handler back (a tune_problem called later runs). Off the main
    thread (which alone takes signals), or nested, a no-op."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is _on_sigint):
        yield
        return
    _requested.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
        _requested.clear()


@contextmanager
def held_back() -> Iterator[None]:
    """Within: SIGINT is blocked in this thread, so processes started here start with it blocked (a
    Ctrl-C while a worker imports would raise in its start-up); one that comes meanwhile is delivered
    here after."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def in_worker(stop: _Flag) -> None:
    """In a worker process started under `held_back`: ignore SIGINT, and stop (`check`) once `stop` is
    set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _shared[:] = [stop]
