"""tune's live display: an overall bar with ETA, one line per device with the problem it is on, a log
line per result. Loaded when a tuning run starts (with the tuner)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from ..problem import Problem, vendor_name
from ..tuning.run import Event, TuneRow, run_tuning
from .common import console, interpreter_mode, num, winner_text


class _Display:
    """Overall bar with ETA, one live line per device with the problem it is on, a log line per result."""

    def __init__(self, progress: Progress, problems: list[Problem]) -> None:
        self.progress = progress
        self.overall = progress.add_task("tuning", total=len(problems))
        self.lines: dict[str, int] = {}
        self.problems = problems

    def __call__(self, ev: Event) -> None:
        if ev.device not in self.lines and ev.kind != "exit":
            self.lines[ev.device] = self.progress.add_task("", total=None, device=True)
        line = self.lines.get(ev.device)
        if ev.kind == "start" and line is not None:
            label = self.problems[ev.index].short()
            self.progress.reset(line, description=f"  {ev.device}: {label}", total=None)
        elif ev.kind == "done" and ev.row is not None:
            self.progress.advance(self.overall)
            if line is not None:
                self.progress.update(line, description=f"  {ev.device}: idle")
            self.progress.console.print(_log_line(ev.row), markup=False, highlight=False)
        elif ev.kind == "exit" and line is not None:
            note = f" ({ev.message})" if ev.message else ""
            self.progress.update(line, description=f"  {ev.device}: done{note}", total=1, completed=1)

    def finish(self) -> None:
        """Only the overall bar stays on screen once every problem is done."""
        for line in self.lines.values():
            self.progress.remove_task(line)
        self.lines.clear()


def _log_line(r: TuneRow) -> str:
    head = f"{r.status:9} {r.problem.short():28} [{r.device}]"
    if not r.ok:
        return f"{head} {r.reason}"
    speed = f", {r.speedup:.2f}x {vendor_name(r.problem)}" if r.speedup else ""
    return f"{head} {winner_text(r)} {num(r.tflops, '.1f')} TFLOP/s{speed}"


class _OverallOnly(ProgressColumn):
    """A column shown on the overall bar only: a device line has no count or ETA of its own."""

    def __init__(self, inner: ProgressColumn) -> None:
        super().__init__()
        self.inner = inner

    def render(self, task: Task) -> RenderableType:
        return Text("") if task.fields.get("device") else self.inner.render(task)


def _progress() -> Progress:
    bar = [_OverallOnly(c) for c in (BarColumn(), MofNCompleteColumn())]
    eta = [_OverallOnly(c) for c in (TextColumn("ETA"), TimeRemainingColumn())]
    # Elapsed on every line: the whole run on the bar, the current problem on a device line.
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), *bar, TimeElapsedColumn(), *eta,
                    console=console, transient=False)


def run_with_progress(problems: list[Problem], device_ids: list[int], url: str, options: dict
                       ) -> list[TuneRow]:
    progress = _progress()
    display = _Display(progress, problems)
    with progress:
        try:
            return run_tuning(problems, device_ids, url, interpreter=interpreter_mode(), options=options,
                              on_event=display)
        finally:
            display.finish()


