"""Test set-up: kernels run in Triton's interpreter unless a CUDA GPU is present; the fixtures that
several test modules use (helpers they share are in tests/helpers/).

TRITON_INTERPRET must be set before triton is imported, so it is set here, before any test module
imports tritonblas' kernels.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "0" if os.environ.get("TRITONBLAS_TEST_GPU") == "1" else "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available() else "cpu"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """An empty tuning database: an SQLite file, or the CI PostgreSQL server (skipped without one)."""
    from helpers.db import empty_db

    yield from empty_db(request.param, tmp_path)


@pytest.fixture
def db(db_url):
    from tuning_db import TuningDB

    with TuningDB(db_url) as opened:
        yield opened


@pytest.fixture
def no_gpu(monkeypatch):
    """A CPU box with the interpreter off (the GPU count is faked so this holds on a GPU host too). The
    kernels are imported first: triton.jit reads TRITON_INTERPRET when a kernel is defined, and kernels
    first defined here would stay compiled ones for the rest of the session (the interpreter's tests
    after it then failed: a quantized tuning run after `explain` found no candidate that ran)."""
    from tritonblas.cli import common
    from tritonblas.launch import gemm

    gemm._kernels()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(common, "gpu_count", lambda: 0)


@pytest.fixture
def x():
    """Valid operands (ERROR_SHAPE), a sentinel-filled `out`, for the bad-input cases to spoil."""
    from types import SimpleNamespace

    from helpers.bad_inputs import K, M, N, f16, tensor

    a, b = tensor(M, K), tensor(K, N)
    return SimpleNamespace(a=a, b=b, bias=tensor(N), out=torch.full((M, N), 7.0, dtype=f16),
                           w=tensor(N, K))


@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
    """A valid three-entry config file from a scratch database (tests only read it)."""
    from helpers.db import ENV, grid_winners

    from tuning_db import TuningDB
    from tuning_db import exchange as ex

    folder = tmp_path_factory.mktemp("good")
    with TuningDB(str(folder / "src.sqlite")) as src:
        src.import_winners(grid_winners(3))
        ex.export_file(src, folder / "good.json", "sm_90", env=ENV)
    return folder / "good.json"


@pytest.fixture
def paths(tmp_path):
    """A user DB url (file created on first TuningDB) and a shipped-config folder, both empty; dispatch
    points at them for the test and is reset after it."""
    from tritonblas.selection import dispatch

    url = str(tmp_path / "user.sqlite")
    shipped = tmp_path / "configs"
    shipped.mkdir()
    dispatch.set_shipped_dir(shipped)
    with dispatch.using_database(url):
        yield url, shipped
    dispatch.set_shipped_dir(None)


@pytest.fixture
def fresh_dispatch(paths) -> None:
    """Dispatch with no DB winner and no shipped file, for tests that need the state, not the paths."""


@pytest.fixture
def private_default_db(monkeypatch, tmp_path):
    """Commands run without --db use $TRITONBLAS_DB: point it away from the user's own database."""
    monkeypatch.setenv("TRITONBLAS_DB", str(tmp_path / "default.sqlite"))


@pytest.fixture
def fake_gpu_benchmark(monkeypatch):
    """The CLI's tuner builds benchmark.GpuBenchmark(); swap in the fake (single device, in process)."""
    from helpers.fakes import WorkerBench

    from tritonblas.tuning import benchmark as benchmark_module

    monkeypatch.setattr(benchmark_module, "GpuBenchmark", lambda **kw: WorkerBench())


def _dispatch_patched(monkeypatch, value=None):
    """Yield `value`; after the test, dispatch is itself again: the test's patches undone, then the
    selections and plans dropped (none made under a patch outlives the test)."""
    from tritonblas.selection import dispatch

    yield value
    monkeypatch.undo()
    dispatch.clear_cache()


@pytest.fixture
def pick_torch(monkeypatch):
    """pick_torch_where(predicate): dispatch selects torch.mm for the problems it accepts."""
    from helpers.picks import pick_torch_where

    yield from _dispatch_patched(monkeypatch, lambda wanted: pick_torch_where(monkeypatch, wanted))


@pytest.fixture
def pick_kernel(monkeypatch):
    """pick_kernel_where(predicate, time_ms): dispatch selects a kernel timed at time_ms for the problems
    it accepts."""
    from helpers.picks import pick_kernel_where

    yield from _dispatch_patched(monkeypatch,
                                 lambda wanted, time_ms: pick_kernel_where(monkeypatch, wanted, time_ms))


@pytest.fixture
def capture_only(monkeypatch):
    """Every kernel selection leaves eager calls to torch and runs under graph capture only, as
    call.path.eager_vendor decides for a host-bound pick."""
    from tritonblas.call import path as call_path
    from tritonblas.selection import dispatch

    monkeypatch.setattr(call_path, "eager_vendor", lambda *args: True)
    dispatch.clear_cache()
    yield from _dispatch_patched(monkeypatch)


@pytest.fixture
def torch_picked(pick_torch):
    """Dispatch selecting torch.mm for every problem."""
    pick_torch(lambda problem: True)
