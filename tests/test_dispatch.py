"""Dispatch layers and sources: user DB -> shipped file -> nearest neighbour -> heuristic, plus the
cache, the lazy DB, family restriction and the fallback (one warning) when the DB cannot be used."""

from __future__ import annotations

import warnings

import pytest
from helpers.db import TUNED, newer_schema
from helpers.dispatch import put, ship, winner

from tritonblas.arch import DeviceInfo, device_for_arch
from tritonblas.config import GemmConfig
from tritonblas.problem import Problem
from tritonblas.selection import dispatch, heuristic
from tuning_db import DatabaseLockedError, EnvIdentity, Measurement, ProblemKey, TuningDB, Winner
from tuning_db.engine import make_engine, normalize_url
from tuning_db.migrations import migrate

H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
H100 = device_for_arch("sm_90", "NVIDIA H100 80GB HBM3", 132)
H100_PCIE = device_for_arch("sm_90", "NVIDIA H100 PCIe", 114)
P = Problem(1024, 1024, 1024, "bf16")
OTHER = GemmConfig(block_m=128, block_n=64, block_k=64, group_m=16, num_warps=8, num_stages=2)
# Configs the model ranks close to its own pick near 1024^3, so dispatch keeps them as neighbours.
NEAR = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4)
COPY = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, tma=True,
                  aligned_copy=True)
SK = GemmConfig(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=4, streamk=True, grid=200)


def stale_env() -> EnvIdentity:
    """Tuned for other kernel sources: never used, whatever the triton version."""
    return EnvIdentity.current().model_copy(update={"kernel_hash": "0ld"})


def tuned_under(triton: str) -> EnvIdentity:
    """The running kernels, tuned under triton `triton`."""
    return EnvIdentity.current().model_copy(update={"triton_version": triton})


@pytest.fixture
def running_triton(monkeypatch):
    """running_triton("3.9.0"): the running code reports that triton version from now on."""
    from tritonblas import identity

    def run_under(version: str) -> None:
        monkeypatch.setattr(identity, "triton_version", lambda: version)
        dispatch.clear_cache()

    yield run_under
    dispatch.clear_cache()  # nothing read under the patched version outlives the test


def sel(problem: Problem = P, device: DeviceInfo = H200, **kw) -> dispatch.Selection:
    return dispatch.select(problem.m, problem.n, problem.k, problem.dtype, layout=problem.layout,
                           bias=problem.bias, device=device, **kw)


def test_heuristic_when_nothing_is_tuned(paths):
    s = sel(backend="triton")
    best = heuristic.rank(P, H200)[0]
    assert (s.source, s.config, s.measured) == ("heuristic", best.config, False)
    assert s.time_ms == pytest.approx(best.total_us / 1000) and s.ranked(3)[0] == best
    assert "heuristic" in s.describe()
    # Without the restriction the heuristic's vendor rule answers for 1024^3 on an H200 (the model puts
    # its best kernel at 0.35 of the roofline; torch.mm won there in the tuning runs).
    s = sel()
    assert (s.source, s.config, s.backend) == ("heuristic", GemmConfig.vendor(), "torch")
    assert "roofline" in s.detail


def test_user_db_winner_is_used(paths):
    url, _ = paths
    put(url, winner(P, H200, TUNED, 0.123, torch_ms=0.125))
    s = sel()
    assert (s.source, s.config, s.time_ms, s.measured) == ("db", TUNED, 0.123, True)
    assert s.torch_ms == 0.125  # what dispatch weighs against a call's host cost (call.path.eager_vendor)
    assert dispatch.select_config(Problem(1024, 1024, 1024, "bf16"), H200) == TUNED


def test_db_winner_of_another_device_of_the_arch_serves(paths):
    url, _ = paths
    put(url, winner(P, H100_PCIE, TUNED, 0.2))
    s = sel()
    assert (s.source, s.config) == ("db", TUNED) and "H100 PCIe" in s.detail


def test_stale_db_winner_is_not_used(paths):
    url, _ = paths
    put(url, winner(P, H200, TUNED, 0.1, env=stale_env()))
    assert sel().source == "heuristic"


def test_shipped_file_serves_any_device_of_its_arch_below_the_user_db(paths):
    url, shipped = paths
    ship(shipped, H100, winner(P, H100, OTHER, 0.3, torch_ms=0.31))
    s = sel()
    assert (s.source, s.config, s.time_ms, s.torch_ms) == ("shipped", OTHER, 0.3, 0.31) and "H100" in s.detail
    put(url, winner(P, H200, TUNED, 0.5))  # slower than the shipped time, but this machine's own
    assert (sel().source, sel().config) == ("db", TUNED)


def test_stale_shipped_file_is_a_miss(paths):
    # Issue 3: an entry tuned for other kernel sources is not used by dispatch.
    _, shipped = paths
    ship(shipped, H100, winner(P, H100, OTHER, 0.3, env=stale_env()), env=stale_env())
    s = sel()
    assert s.source == "heuristic" and s.config != OTHER


def store(layer: str, paths, *winners: Winner) -> None:
    """`winners` into the user DB (layer "db") or the shipped file (layer "shipped")."""
    url, shipped = paths
    if layer == "db":
        put(url, *winners)
    else:
        ship(shipped, H100, *winners)


LAYERS = ["db", "shipped"]


@pytest.mark.parametrize("layer", LAYERS)
def test_winner_of_another_triton_version_serves_and_says_so(paths, running_triton, layer):
    # Issue 33: a winner tuned under triton 3.6.0 serves under 3.9.0 (same kernels), saying so.
    store(layer, paths, winner(P, H100, OTHER, 0.3, env=tuned_under("3.6.0")))
    running_triton("3.9.0")
    s = sel()
    assert (s.source, s.config, s.time_ms) == (layer, OTHER, 0.3)
    assert "under triton 3.6.0 (another version than the running 3.9.0)" in s.detail
    running_triton("3.6.0")
    assert "under triton 3.6.0" in sel().detail and "another version" not in sel().detail


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("running, expected", [
    ("3.9.0", TUNED),  # its own version's row, though slower
    ("3.6.0", OTHER),
    ("3.8.0", OTHER),  # neither: the fastest of the others
])
def test_the_running_triton_versions_row_wins(paths, running_triton, layer, running, expected):
    store(layer, paths, winner(P, H100, OTHER, 0.1, env=tuned_under("3.6.0")),
          winner(P, H100, TUNED, 0.5, env=tuned_under("3.9.0")))
    running_triton(running)
    s = sel()
    assert (s.source, s.config) == (layer, expected)
    assert f"under triton {'3.9.0' if expected == TUNED else '3.6.0'}" in s.detail


@pytest.mark.parametrize("layer", LAYERS)
def test_another_versions_winner_is_rechecked_and_falls_back_on_a_compile_failure(paths, running_triton,
                                                                                 monkeypatch, layer):
    store(layer, paths, winner(P, H100, OTHER, 0.3, env=tuned_under("3.6.0")))
    running_triton("3.9.0")
    with monkeypatch.context() as m:  # infeasible here (as a new triton's limits might make it)
        m.setattr(dispatch, "config_supports", lambda config, problem, device:
                  "too big" if config == OTHER else None)
        assert (sel().source, sel().config != OTHER) == ("heuristic", True)
    dispatch.clear_cache()
    assert sel().config == OTHER
    with pytest.warns(RuntimeWarning, match="could not be compiled"):
        dispatch.report_compile_failure(P, H200, OTHER, RuntimeError("out of resources"))
    assert sel().source != layer and sel().config != OTHER


def test_db_family_fallback_reads_the_measurements_of_the_winners_triton(paths, running_triton):
    url, _ = paths
    old = tuned_under("3.6.0")
    put(url, winner(P, H200, GemmConfig.vendor(), 0.1, env=old),
        measurements=[(ProblemKey.from_problem(P, H200), old, [Measurement(config=TUNED, status="ok",
                                                                           median_ms=0.2)])])
    running_triton("3.9.0")
    assert (sel().source, sel().backend) == ("db", "torch")
    s = sel(backend="triton")
    assert (s.source, s.config, s.time_ms) == ("db", TUNED, 0.2)


def test_explain_says_which_triton_tuned_a_shipped_winner(paths, running_triton, no_gpu):
    from typer.testing import CliRunner

    from tritonblas.cli import app

    url, shipped = paths
    ship(shipped, H100, winner(P, H100, OTHER, 0.3, env=tuned_under("3.6.0")))
    TuningDB(url).close()
    running_triton("3.9.0")
    result = CliRunner().invoke(app, ["explain", "1024", "1024", "1024", "--arch", "sm_90", "--db", url],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "source:   shipped: configs/sm_90.json, tuned on NVIDIA H100 80GB HBM3 under triton 3.6.0 " \
           "(another version than the running 3.9.0)" in result.output


def test_broken_shipped_file_warns_and_is_skipped(paths):
    _, shipped = paths
    (shipped / "sm_90.json").write_text("{not json")
    dispatch.set_shipped_dir(shipped)
    with pytest.warns(RuntimeWarning, match="sm_90.json"):
        assert sel().source == "heuristic"


# (query, expected source): P = 1024^3 bf16 nn is tuned.
NEIGHBOUR_CASES = [
    (Problem(1024, 1024, 2048, "bf16"), "neighbor"),
    (Problem(700, 1500, 1024, "bf16", bias="row"), "neighbor"),  # another bias kind still counts
    (Problem(1024, 1024, 16384, "bf16"), "heuristic"),  # 16x in K: too far
    (Problem(1024, 1024, 2048, "fp16"), "heuristic"),  # other dtype
    (Problem(1024, 1024, 2048, "bf16", "nt"), "heuristic"),  # other layout
]


@pytest.mark.parametrize("query, source", NEIGHBOUR_CASES, ids=lambda x: str(x))
def test_nearest_neighbour(paths, query, source):
    url, _ = paths
    put(url, winner(P, H200, TUNED, 0.1), winner(Problem(64, 64, 64, "bf16"), H200, OTHER, 0.01))
    s = sel(query, backend="triton")  # kernels: near 1024^3 the vendor rule outranks a kernel neighbour
    assert s.source == source
    if source == "neighbor":
        assert s.config == TUNED and not s.measured and "1024x1024x1024" in s.detail
        assert s.time_ms == pytest.approx(heuristic.estimate(TUNED, query, H200).total_us / 1000)


def test_neighbour_must_be_feasible_for_the_new_shape(paths):
    url, _ = paths
    tma = TUNED.model_copy(update={"tma": True})
    put(url, winner(P, H200, tma, 0.1), winner(Problem(2048, 2048, 2048, "bf16"), H200, COPY, 0.5))
    # K = 1001: A's rows are 2002 bytes, not a multiple of 16: tensor descriptors cannot load them, so
    # the nearer TMA winner is skipped for the farther one (a padded copy, then TMA).
    s = sel(Problem(1024, 1024, 1001, "bf16"), backend="triton")
    assert (s.source, s.config) == ("neighbor", COPY)
    assert (sel(Problem(1024, 1024, 1008, "bf16"), backend="triton").config) == tma


def test_neighbour_the_model_calls_much_slower_gives_way_to_the_heuristic(paths):
    url, _ = paths
    put(url, winner(P, H200, OTHER, 0.1))
    # For K = 1001 the 2-stage pointer config loads A element by element: the model puts it more than
    # NEIGHBOR_SLACK times behind its own pick, so the heuristic answers.
    query = Problem(1024, 1024, 1001, "bf16")
    ranked = heuristic.rank(query, H200)
    assert heuristic.estimate(OTHER, query, H200).total_us > dispatch.NEIGHBOR_SLACK * ranked[0].total_us
    s = sel(query, backend="triton")
    assert (s.source, s.config) == ("heuristic", ranked[0].config)


def test_shipped_entries_are_neighbours_too(paths):
    _, shipped = paths
    ship(shipped, H100, winner(P, H100, NEAR, 0.3))
    s = sel(Problem(1024, 2048, 1024, "bf16"), backend="triton")
    assert (s.source, s.config) == ("neighbor", NEAR)


def test_family_restriction(paths):
    url, _ = paths
    key = ProblemKey.from_problem(P, H200)
    env = EnvIdentity.current()
    rows = [Measurement(config=SK, status="ok", median_ms=0.1), Measurement(config=TUNED, status="ok",
            median_ms=0.2), Measurement(config=OTHER, status="wrong_result", rel_error=1.0)]
    put(url, winner(P, H200, SK, 0.1), measurements=[(key, env, rows)])
    assert (sel().config, sel(enable_streamk=True).config) == (SK, SK)
    s = sel(enable_streamk=False)
    assert (s.source, s.config, s.time_ms) == ("db", TUNED, 0.2)
    # no persistent measurement for this shape: the neighbour SK winner is skipped too
    other = Problem(1024, 1024, 512, "bf16")
    s = sel(other, enable_streamk=False)
    assert s.source == "heuristic" and not s.config.streamk
    assert all(not e.config.streamk for e in s.ranked())
    assert sel(other, enable_streamk=True).source == "neighbor"


def test_db_is_opened_once_lazily_and_cached_keys_never_touch_it(paths, monkeypatch):
    url, _ = paths
    put(url, winner(P, H200, TUNED, 0.1))
    opened, lookups = [], []
    real_init, real_lookup = TuningDB.__init__, TuningDB.lookup
    monkeypatch.setattr(TuningDB, "__init__",
                        lambda self, *a, **k: opened.append(a) or real_init(self, *a, **k))
    monkeypatch.setattr(TuningDB, "lookup", lambda self, key, env=None: lookups.append(key) or
                        real_lookup(self, key, env))
    dispatch.set_database(url)
    assert opened == [] and lookups == []
    for _ in range(3):
        assert sel().config == TUNED
        assert dispatch.select_config(Problem(1024, 1024, 1024, "bf16"), H200) == TUNED
    sel(Problem(64, 64, 64, "bf16"))
    assert len(opened) == 1 and len(lookups) == 2
    dispatch.clear_cache()  # e.g. after tuning in another process: reopen, look again
    sel()
    assert len(opened) == 2 and len(lookups) == 3


def test_db_location_comes_from_the_env_var_at_first_dispatch(paths, tmp_path, monkeypatch):
    env_db = str(tmp_path / "from-env.sqlite")
    put(env_db, winner(P, H200, TUNED, 0.1))
    dispatch.set_database(None)
    monkeypatch.setenv("TRITONBLAS_DB", env_db)
    assert sel().source == "db"


def test_missing_db_file_is_not_created(paths, tmp_path):
    dispatch.set_database(str(tmp_path / "nowhere" / "none.sqlite"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sel().source == "heuristic"
    assert not (tmp_path / "nowhere").exists()


def _corrupt(path: str) -> None:
    with open(path, "wb") as f:
        f.write(b"this is not a database" * 100)


def _older_schema(path: str) -> None:
    engine = make_engine(normalize_url(path))
    migrate(engine, path, target=1)
    engine.dispose()


def test_older_schema_is_not_migrated_by_a_reader(paths):
    # Upgrading writes (and could wait a busy timeout on a tuner); dispatch only reads: one warning,
    # the file left as it was, and tritonblas-tune upgrades it later.
    url, _ = paths
    _older_schema(url)
    before = open(url, "rb").read()
    dispatch.set_database(url)
    with pytest.warns(RuntimeWarning, match="older than"):
        assert sel().source == "heuristic"
    assert open(url, "rb").read() == before


@pytest.mark.parametrize("spoil", [_corrupt, newer_schema], ids=["corrupt", "newer-schema"])
def test_unusable_db_falls_back_with_one_warning(paths, spoil):
    url, shipped = paths
    ship(shipped, H100, winner(P, H100, OTHER, 0.3))
    spoil(url)
    dispatch.set_database(url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sources = [sel(p).source for p in (P, Problem(64, 64, 64, "fp16"), Problem(99, 99, 99, "fp16"))]
        dispatch.clear_cache()  # reopens the DB: it fails again, silently this time
        sources.append(sel().source)
    assert sources == ["shipped", "heuristic", "heuristic", "shipped"]
    assert len(caught) == 1 and "user.sqlite" in str(caught[0].message)


def test_db_failing_after_open_is_dropped_with_one_warning(paths, monkeypatch):
    url, _ = paths
    put(url, winner(P, H200, TUNED, 0.1))
    calls = []

    def locked(self, key, env=None):
        calls.append(key)
        raise DatabaseLockedError(f"{url}: database is locked")

    monkeypatch.setattr(TuningDB, "lookup", locked)
    dispatch.set_database(url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [sel().source, sel(Problem(64, 64, 64, "fp16")).source] == ["heuristic", "heuristic"]
    assert len(calls) == 1 and len(caught) == 1 and "locked" in str(caught[0].message)


def test_user_config(paths):
    s = sel(config=OTHER)
    assert (s.source, s.config, s.measured) == ("user", OTHER, False)
    huge = GemmConfig(block_m=256, block_n=256, block_k=256, num_warps=4, num_stages=4)
    with pytest.raises(ValueError, match="not feasible"):
        sel(config=huge)
    with pytest.raises(TypeError, match="config"):
        sel(config={"block_m": 64})


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((-1, 8, 8, "fp16"), {}, ValueError, "m must be >= 0"),
    ((8, True, 8, "fp16"), {}, TypeError, "n must be an int"),
    ((8, 8, 8.0, "fp16"), {}, TypeError, "k must be an int"),
    ((8, 8, 8, "fp64"), {}, ValueError, "dtype must be one of"),
    ((8, 8, 8, "fp16"), {"out_dtype": "fp32"}, ValueError, "out_dtype"),
    ((8, 8, 8, "fp16"), {"layout": "NN"}, ValueError, "layout"),
    ((8, 8, 8, "fp16"), {"bias": "vector"}, ValueError, "bias"),
    ((8, 8, 8, "fp16"), {"enable_streamk": 1}, TypeError, "enable_streamk"),
    ((8, 8, 8, "fp16"), {"device": "tpu"}, ValueError, "device"),
])
def test_select_rejects_bad_arguments(paths, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        dispatch.select(*args, **{"device": H200, **kwargs})


def test_select_takes_torch_dtypes_and_the_default_device(paths):
    import torch

    s = dispatch.select(32, 32, 32, torch.float16)
    assert s.problem.dtype == "fp16" and s.device.arch == "interpreter"  # tests run in the interpreter


def test_user_config_is_checked_against_the_operands_layout():
    tma = GemmConfig(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=3, tma=True)
    # M = 104, K = 33 fp16: a column-major A has 208-byte rows (TMA can load them), a row-major one
    # 66-byte rows (it cannot).
    dispatch.check_user_config(tma, Problem(104, 40, 33, "fp16", "tn"), H200)
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        dispatch.check_user_config(tma, Problem(104, 40, 33, "fp16"), H200)
