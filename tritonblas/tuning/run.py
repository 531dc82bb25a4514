"""A tuning run: many problems, on one device or over several GPUs (one worker process per device,
problems handed out from a shared queue), or one shard of a shapes file on one host of many.

The one tuning loop is `_loop`: `tune_problems` runs it in this process on a given device and database;
`run_tuning` runs it in this process for one device or in one spawned worker per device (`work_loop`).

Every worker opens the same database URL and commits each problem as it finishes (the DB serialises
writers), so rows from all devices land in one place and an interrupted run keeps what is done. The
parent only hands out work and collects one small, picklable `TuneRow` per problem for the display.
A winner is reported only once it has been read back: by the worker right after its commit, and by the
parent through a connection of its own once every worker has gone (`verify_rows`).

Workers start with the spawn method: a forked child would inherit the parent's CUDA state, which CUDA
does not allow. A spawned child inherits the parent's environment, TRITON_INTERPRET included, so CPU
"devices" run in Triton's interpreter (how the orchestration is tested without a GPU).

Ctrl-C (tuning.interrupt) stops the run between candidates or problems, never inside a library's
callback: what is stored stays, the interrupted problem stores nothing; workers stop when told.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from ..arch import DeviceInfo
from ..arith import tflops
from ..config import GemmConfig
from ..problem import Problem
from . import interrupt

RowStatus = Literal["tuned", "skipped", "no_winner", "failed"]
# How long the parent waits for a result before checking that its workers are still alive.
_POLL_S = 0.5


@dataclass(frozen=True)
class TuneRow:
    """One problem's result as the CLI shows it; crosses process boundaries, so plain data only."""

    index: int
    problem: Problem
    status: RowStatus
    device: str
    config: GemmConfig | None = None
    median_ms: float | None = None
    torch_ms: float | None = None
    previous: str = ""  # where dispatch's choice came from before this run: db, shipped, neighbor, ...
    reason: str = ""
    elapsed_s: float = 0.0
    winner: Any = None  # the tuning_db Winner this row reports as stored (pydantic: it pickles)
    key: Any = None  # the problem's tuning_db ProblemKey on this device (None when it never got that far)
    candidates: int = 0  # the size of its candidate space
    measured: int = 0  # the candidates measured (and recorded, failures included) by this run

    @property
    def ok(self) -> bool:
        return self.status in ("tuned", "skipped") and self.config is not None

    @property
    def tflops(self) -> float | None:
        return tflops(self.problem.m, self.problem.n, self.problem.k, self.median_ms)

    @property
    def speedup(self) -> float | None:
        return None if not (self.median_ms and self.torch_ms) else self.torch_ms / self.median_ms


@dataclass(frozen=True)
class Event:
    """start: `device` began problem `index`; done: `row` is its result; exit: the worker is finished
    (`message` says why when it could not work at all)."""

    kind: Literal["start", "done", "exit"]
    device: str
    index: int = -1
    row: TuneRow | None = None
    message: str = ""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C: `rows` are the problems finished (and committed) before it."""

    def __init__(self, rows: list[TuneRow]) -> None:
        super().__init__(f"interrupted after {len(rows)} finished problem(s)")
        self.rows = rows


def device_label(index: int, interpreter: bool) -> str:
    return f"cpu{index}" if interpreter else f"cuda:{index}"


def _previous_source(problem: Problem, info: DeviceInfo) -> str:
    from ..selection import dispatch

    dispatch.clear_cache()  # problems tuned earlier in this run are neighbours now
    try:
        return dispatch.select_problem(problem, device=info).source
    except (RuntimeError, ValueError) as exc:
        return f"none ({exc})"


def tune_one(index: int, problem: Problem, info: DeviceInfo, db, label: str,
             options: dict[str, Any]) -> TuneRow:
    """Tune one problem; any failure becomes a row with the reason, never a lost worker."""
    from tuning_db import TuningDBError

    from .tuner import tune_problem

    start = time.monotonic()
    previous = _previous_source(problem, info)
    try:
        out = tune_problem(problem, info, db, **options)
    except TuningDBError:
        raise  # the database cannot take results: stop this worker rather than benchmark for nothing
    except Exception as exc:  # the tuner records candidate failures itself; this is the problem failing
        return TuneRow(index, problem, "failed", label, previous=previous,
                       reason=f"{type(exc).__name__}: {exc}", elapsed_s=time.monotonic() - start)
    w = out.winner
    torch_ms = w.torch_ms if w is not None and out.torch_ms is None else out.torch_ms
    row = TuneRow(index, problem, out.status, label, None if w is None else w.config,
                  None if w is None else w.median_ms, torch_ms, previous, out.reason,
                  time.monotonic() - start, w, out.key, out.candidates, len(out.measurements))
    return read_back(db, row)


def read_back(db, row: TuneRow) -> TuneRow:
    """`row` as the database `db` holds it: a winner that is not stored fails the row, naming the
    problem; a faster winner stored before (kept by the upsert) replaces the row's own. Rows without
    a winner come back as they are."""
    w = row.winner
    if w is None or not row.ok:
        return row
    from tuning_db import TuningDBError

    try:
        stored = db.get_winner(w.key, w.env)
    except TuningDBError as exc:
        return dataclasses.replace(row, status="failed", reason=f"winner {w.config.short()} not read back: "
                                   f"{exc}")
    if stored is None or stored.median_ms > w.median_ms:
        return dataclasses.replace(row, status="failed", reason=(
            f"winner {w.config.short()} ({w.median_ms:.4g} ms) was written, but reading it back from "
            f"{db.where} finds {'no winner' if stored is None else 'a slower one'}: it was lost"))
    if stored.config == w.config and stored.median_ms == w.median_ms:
        return row
    return dataclasses.replace(row, config=stored.config, median_ms=stored.median_ms, winner=stored,
                               torch_ms=row.torch_ms if stored.torch_ms is None else stored.torch_ms)


def verify_rows(rows: list[TuneRow], db_url: str | None) -> list[TuneRow]:
    """Read every reported winner back through a connection of its own, after the workers have
    closed theirs: "tuned" and "skipped" are claimed only for winners the database holds."""
    if not any(r.ok and r.winner is not None for r in rows):
        return rows
    from tuning_db import TuningDB, TuningDBError

    try:
        db = TuningDB(db_url, create=False, migrate=False)  # a reader: it writes nothing
    except TuningDBError as exc:
        return [dataclasses.replace(r, status="failed", reason=f"winner not read back: {exc}")
                if r.ok and r.winner is not None else r for r in rows]
    with db:
        return [read_back(db, r) for r in rows]


def _loop(next_task: Callable[[], tuple[int, Problem] | None], emit: Callable[[Event], None],
          info: DeviceInfo, db, label: str, options: dict[str, Any]) -> None:
    """The tuning loop: take problems until `next_task` gives None, tuning each on `info` into `db`;
    Ctrl-C stops it before it takes the next one."""
    while True:
        interrupt.check()
        if (task := next_task()) is None:
            return
        index, problem = task
        emit(Event("start", label, index))
        emit(Event("done", label, index, row=tune_one(index, problem, info, db, label, options)))


def work_loop(next_task: Callable[[], tuple[int, Problem] | None], emit: Callable[[Event], None],
              device: int, interpreter: bool, db_url: str | None, options: dict[str, Any]) -> None:
    """The loop on GPU `device` (a CPU "device" in the interpreter), into its own connection to the DB at
    `db_url`, with dispatch reading the same DB (what each problem's `previous` source says)."""
    from tuning_db import TuningDB

    from ..device import on_device
    from ..selection import dispatch

    with dispatch.using_database(db_url), TuningDB(db_url) as db, on_device(device, interpreter) as info:
        _loop(next_task, emit, info, db, device_label(device, interpreter), options)


def _in_process(problems: list[Problem], on_event: Callable[[Event], None]):
    """For the loop in this process: the problems in order as tasks, and an event sink that collects
    the rows (the list returned) before passing each event on."""
    pending = list(enumerate(problems))
    rows: list[TuneRow] = []

    def emit(ev: Event) -> None:
        if ev.row is not None:
            rows.append(ev.row)
        on_event(ev)

    return (lambda: pending.pop(0) if pending else None), emit, rows


def tune_problems(problems: Iterable[Problem], device: DeviceInfo, db, *,
                  on_event: Callable[[Event], None] = lambda ev: None, **options: Any) -> list[TuneRow]:
    """Tune each problem in turn on `device` (a DeviceInfo; no GPU is selected) into `db`, an open
    TuningDB; `options` go to tuner.tune_problem. One row per problem, in order; a rerun skips the
    problems that have a fresh winner. Every problem is checked before any is tuned.

    Ctrl-C raises Interrupted (a KeyboardInterrupt) with the rows finished before it: their results are
    committed; the interrupted problem wrote nothing.
    """
    from ..selection import dispatch
    from .tuner import check_problem

    problems = list(problems)
    for p in problems:
        check_problem(p)
    next_task, emit, rows = _in_process(problems, on_event)
    try:
        with interrupt.deferred(), dispatch.using_database(db.url):
            _loop(next_task, emit, device, db, device.name, options)
    except KeyboardInterrupt:
        raise Interrupted(rows) from None
    return rows


def _worker_main(device: int, interpreter: bool, db_url: str | None, options: dict[str, Any],
                 tasks: mp.Queue, results: mp.Queue, stop) -> None:
    label = device_label(device, interpreter)
    message = ""
    try:
        interrupt.in_worker(stop)
        work_loop(lambda: tasks.get(), results.put, device, interpreter, db_url, options)
    except KeyboardInterrupt:
        message = "interrupted"
    except Exception as exc:  # reported to the parent, which marks this worker's problem failed
        message = f"worker on {label} stopped: {type(exc).__name__}: {exc}"
    results.put(Event("exit", label, message=message))


class _Pool:
    """The parent's view of the workers: who works on what, and who has gone."""

    def __init__(self, problems: list[Problem], devices: list[int], interpreter: bool,
                 db_url: str | None, options: dict[str, Any]) -> None:
        ctx = mp.get_context("spawn")
        self.tasks, self.results, self.stop_event = ctx.Queue(), ctx.Queue(), ctx.Event()
        for task in enumerate(problems):
            self.tasks.put(task)
        for _ in devices:
            self.tasks.put(None)
        self.problems = problems
        self.procs = {device_label(d, interpreter): ctx.Process(
            target=_worker_main, args=(d, interpreter, db_url, options, self.tasks, self.results,
                                       self.stop_event),
            daemon=True, name=f"tritonblas-tune-{d}") for d in devices}
        self.current: dict[str, int] = {}
        self.exited: dict[str, str] = {}
        self.rows: dict[int, TuneRow] = {}

    def start(self) -> None:
        with interrupt.held_back():  # each worker starts with SIGINT blocked, then ignores it
            for proc in self.procs.values():
                proc.start()

    def interrupt(self, on_event: Callable[[Event], None], grace_s: float) -> None:
        """Ctrl-C: every worker stops at its next candidate; what they finish meanwhile (grace_s at most,
        or until Ctrl-C again) is collected."""
        self.stop_event.set()
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(KeyboardInterrupt):
            while len(self.exited) < len(self.procs) and time.monotonic() < deadline:
                try:
                    self.handle(self.results.get(timeout=_POLL_S), on_event)
                except queue.Empty:
                    self.reap_dead(on_event)

    def handle(self, ev: Event, on_event: Callable[[Event], None]) -> None:
        if ev.kind == "start":
            self.current[ev.device] = ev.index
        elif ev.kind == "done" and ev.row is not None:
            self.current.pop(ev.device, None)
            self.rows[ev.index] = ev.row
        elif ev.kind == "exit":
            self.exited[ev.device] = ev.message
            self._fail_current(ev.device, ev.message or "worker exited", on_event)
        on_event(ev)

    def _fail_current(self, label: str, reason: str, on_event: Callable[[Event], None]) -> None:
        index = self.current.pop(label, None)
        if index is not None and index not in self.rows:
            row = TuneRow(index, self.problems[index], "failed", label, reason=reason)
            self.rows[index] = row
            on_event(Event("done", label, index, row=row))

    def drain(self, on_event: Callable[[Event], None]) -> None:
        """Handle every event already sent. A process flushes its queue before it exits, so after
        this, an exited worker's events are all in."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.handle(self.results.get(timeout=_POLL_S), on_event)

    def reap_dead(self, on_event: Callable[[Event], None]) -> None:
        """A worker that died without its exit event (killed, crashed in CUDA) fails its problem."""
        dead = [label for label, proc in self.procs.items()
                if label not in self.exited and proc.exitcode is not None]
        if dead:
            self.drain(on_event)
        for label in dead:
            if label not in self.exited:
                self.exited[label] = f"worker on {label} died with exit code {self.procs[label].exitcode}"
                self._fail_current(label, self.exited[label], on_event)

    def fail_unclaimed(self, on_event: Callable[[Event], None]) -> None:
        reasons = "; ".join(m for m in self.exited.values() if m) or "every worker exited"
        for index, problem in enumerate(self.problems):
            if index not in self.rows:
                row = TuneRow(index, problem, "failed", "-", reason=f"not tuned: {reasons}")
                self.rows[index] = row
                on_event(Event("done", "-", index, row=row))

    def stop(self, grace_s: float) -> None:
        """Let finished workers close their DB connections, then end any still running."""
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C again: no more waiting
            for proc in self.procs.values():
                proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.procs.values():
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=10)

    def ordered(self) -> list[TuneRow]:
        return [self.rows[i] for i in sorted(self.rows)]


def _run_pool(pool: _Pool, on_event: Callable[[Event], None]) -> None:
    while len(pool.rows) < len(pool.problems) and len(pool.exited) < len(pool.procs):
        interrupt.check()
        try:
            pool.handle(pool.results.get(timeout=_POLL_S), on_event)
        except queue.Empty:
            pool.reap_dead(on_event)
    # Every worker has gone: whatever is left in the queue was never claimed.
    if len(pool.rows) < len(pool.problems):
        pool.drain(on_event)
        pool.fail_unclaimed(on_event)


def run_tuning(problems: list[Problem], devices: list[int], db_url: str | None, *, interpreter: bool,
               options: dict[str, Any], on_event: Callable[[Event], None] = lambda ev: None
               ) -> list[TuneRow]:
    """Tune `problems` on `devices` into the DB at `db_url`; one row per problem, in input order.

    One device runs in this process; several get one spawned worker each. `options` go to
    tuner.tune_problem (budget_s, force, bench, ...); with several devices they must pickle.
    Ctrl-C, at any point of the run, raises Interrupted with the rows finished so far. Every winner is
    read back before the rows are returned: one the database does not hold fails its row.
    """
    with interrupt.deferred():
        if len(devices) == 1:
            return _run_here(problems, devices[0], interpreter, db_url, options, on_event)
        return _run_workers(_Pool(problems, devices, interpreter, db_url, options), db_url, on_event)


def _run_workers(pool: _Pool, db_url: str | None, on_event: Callable[[Event], None]) -> list[TuneRow]:
    grace_s = 10.0  # for finished workers to close their connections; on Ctrl-C to stop by themselves
    try:
        try:
            pool.start()
            _run_pool(pool, on_event)
        except KeyboardInterrupt:
            pool.interrupt(on_event, grace_s)
            raise
        finally:
            pool.stop(grace_s)
        rows = verify_rows(pool.ordered(), db_url)  # (once the workers have closed their connections)
        interrupt.check()
        return rows
    except KeyboardInterrupt:
        raise Interrupted([r for r in pool.ordered() if r.status != "failed"]) from None


def _run_here(problems: list[Problem], device: int, interpreter: bool, db_url: str | None,
              options: dict[str, Any], on_event: Callable[[Event], None]) -> list[TuneRow]:
    from tuning_db import TuningDBError

    next_task, emit, rows = _in_process(problems, on_event)
    try:
        try:
            work_loop(next_task, emit, device, interpreter, db_url, options)
        except TuningDBError as exc:  # results cannot be stored: the rest fail with the reason, untried
            done = {r.index for r in rows}
            label = device_label(device, interpreter)
            rows += [TuneRow(i, p, "failed", label, reason=f"{type(exc).__name__}: {exc}")
                     for i, p in enumerate(problems) if i not in done]
        verified = verify_rows(rows, db_url)
        interrupt.check()
        return verified
    except KeyboardInterrupt:
        raise Interrupted(rows) from None
