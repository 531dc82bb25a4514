"""Block-wise scaled problems tuned, stored and shipped under their own kernel's hash
(identity.blockscaled_kernel_hash): a change to the block kernel stales their winners only, and a change to
the dense kernels stales none of them."""

from __future__ import annotations

import json

import pytest
from helpers.dispatch import put, winner
from helpers.fakes import FakeBench
from typer.testing import CliRunner

from tritonblas import identity
from tritonblas.arch import device_for_arch
from tritonblas.cli import app
from tritonblas.config import GemmConfig, config_supports
from tritonblas.problem import Problem
from tritonblas.selection import dispatch
from tritonblas.tuning.tuner import tune_problem
from tuning_db import EnvIdentity, ProblemKey, TuningDB
from tuning_db.exchange import export_file, load_config_file

H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
# Ragged (no whole blocks, a bias): torch's block-wise op does not take it, so a kernel is what dispatch
# runs, and what the tuner's winner decides.
BLOCK = Problem(100, 304, 528, "e4m3", "nt", bias="row", out_dtype="bf16", scales="block")
DENSE = Problem(512, 512, 512, "bf16")
BLOCK_TILE = GemmConfig(block_m=64, block_n=128, block_k=128, num_warps=4, num_stages=3, tma=True)
DENSE_TILE = GemmConfig(block_m=128, block_n=64, block_k=64, num_warps=4, num_stages=3)


def block_env() -> EnvIdentity:
    return EnvIdentity.current().for_scales("block")


def edited_block_kernel() -> EnvIdentity:
    """The running code after an edit to the block kernel only."""
    return EnvIdentity.current().model_copy(update={"family_hashes": (("block", "edited"),)})


def test_the_running_environment_names_the_block_kernels_hash():
    running = EnvIdentity.current()
    assert running.for_scales("block").kernel_hash == identity.blockscaled_kernel_hash()
    for scales in ("none", "row", "tensor"):
        assert running.for_scales(scales).kernel_hash == identity.kernel_hash()
    assert set(running.hashes()) == {identity.kernel_hash(), identity.blockscaled_kernel_hash()}


def test_a_block_problem_is_tuned_and_stored_under_the_block_kernels_hash(tmp_path):
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        out = tune_problem(BLOCK, H200, db, bench=FakeBench(torch_ms=5.0), budget_s=60, early_stop=False)
        assert out.status == "tuned" and out.winner.config.backend == "triton"
        assert out.winner.env.kernel_hash == identity.blockscaled_kernel_hash()
        stored = db.get_winner(out.key)
        assert stored is not None and stored.config == out.winner.config and not stored.stale
        assert {m.config for m in db.measurements(out.key)} >= {out.winner.config}
        assert db.lookup(out.key, edited_block_kernel()) is None  # the block kernel changed: stale
        rerun = tune_problem(BLOCK, H200, db, bench=FakeBench(torch_ms=5.0), budget_s=60)
        assert rerun.status == "skipped"


def test_each_family_goes_stale_with_its_own_kernel_only(tmp_path):
    url = str(tmp_path / "t.sqlite")
    put(url, winner(BLOCK, H200, BLOCK_TILE, 0.5, env=block_env()), winner(DENSE, H200, DENSE_TILE, 0.4))
    block_key, dense_key = (ProblemKey.from_problem(p, H200) for p in (BLOCK, DENSE))
    with TuningDB(url) as db:
        assert db.lookup(block_key).config == BLOCK_TILE and db.lookup(dense_key).config == DENSE_TILE
        assert not any(w.stale for w in db.winners())
        assert db.prune() == 0  # nothing of either family is stale
        edited = edited_block_kernel()
        assert db.lookup(block_key, edited) is None and db.lookup(dense_key, edited).config == DENSE_TILE
        states = {(w.key == block_key, w.stale) for w in db.winners(env=edited)}
        assert states == {(False, False), (True, True)}
        assert db.prune(edited) == 1
        assert db.lookup(dense_key).config == DENSE_TILE and db.lookup(block_key) is None


def test_a_block_winner_never_serves_a_dense_key_nor_the_reverse(tmp_path):
    """A winner stored under the other family's hash (a hand-made DB) is stale for its key."""
    url = str(tmp_path / "t.sqlite")
    put(url, winner(BLOCK, H200, BLOCK_TILE, 0.5), winner(DENSE, H200, DENSE_TILE, 0.4, env=block_env()))
    with TuningDB(url) as db:
        for p in (BLOCK, DENSE):
            assert db.lookup(ProblemKey.from_problem(p, H200)) is None


def test_export_writes_one_family_a_file_and_dispatch_reads_both(paths):
    url, shipped = paths
    source = str(shipped.parent / "ship.sqlite")
    put(source, winner(BLOCK, H200, BLOCK_TILE, 0.5, env=block_env()), winner(DENSE, H200, DENSE_TILE, 0.4))
    with TuningDB(source) as db:
        dense = export_file(db, shipped / "sm_90.json", "sm_90")
        block = export_file(db, shipped / "block" / "sm_90.json", "sm_90", family="block")
        with pytest.raises(ValueError, match="family: must be one of gemm, block"):
            export_file(db, shipped / "x.json", "sm_90", family="row")
    assert [e.scales for e in dense.entries] == ["none"]
    assert dense.header.kernel_hash == identity.kernel_hash()
    assert [e.scales for e in block.entries] == ["block"]
    assert block.header.kernel_hash == identity.blockscaled_kernel_hash()
    dispatch.set_shipped_dir(shipped)
    picked = dispatch.select(BLOCK.m, BLOCK.n, BLOCK.k, "e4m3", layout="nt", bias="row", out_dtype="bf16",
                             scales="block", device=H200)
    assert (picked.source, picked.config) == ("shipped", BLOCK_TILE)
    assert dispatch.select(DENSE.m, DENSE.n, DENSE.k, "bf16", device=H200).config == DENSE_TILE
    # the block kernel edited: its file serves nothing, the dense one still does
    assert load_config_file(shipped / "block" / "sm_90.json").serving(edited_block_kernel()) == {}
    assert len(load_config_file(shipped / "sm_90.json").serving(edited_block_kernel())) == 1


def test_a_block_entry_in_a_dense_file_does_not_serve(tmp_path):
    """A file has one kernel hash: block entries under the dense hash (a hand-edited file) are stale."""
    put(str(tmp_path / "t.sqlite"), winner(DENSE, H200, DENSE_TILE, 0.4))
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        export_file(db, tmp_path / "f.json", "sm_90")
    doc = json.loads((tmp_path / "f.json").read_text())
    entry = {**doc["entries"][0], "m": 100, "n": 304, "k": 528, "a_dtype": "e4m3", "b_dtype": "e4m3",
             "out_dtype": "bf16", "scales": "block", "config": BLOCK_TILE.model_dump(mode="json")}
    doc["entries"].append(entry)
    doc["header"]["count"] = 2
    (tmp_path / "f.json").write_text(json.dumps(doc))
    served = load_config_file(tmp_path / "f.json").serving()
    assert [w.key.scales for w, _ in served.values()] == ["none"]


def test_db_export_family_on_the_command_line(tmp_path):
    url = str(tmp_path / "t.sqlite")
    put(url, winner(BLOCK, H200, BLOCK_TILE, 0.5, env=block_env()), winner(DENSE, H200, DENSE_TILE, 0.4))
    runner = CliRunner()
    out = tmp_path / "block" / "sm_90.json"
    result = runner.invoke(app, ["db", "export", "--db", url, "--family", "block", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote 1 winners for sm_90" in result.output
    assert json.loads(out.read_text())["header"]["kernel_hash"] == identity.blockscaled_kernel_hash()
    result = runner.invoke(app, ["db", "export", "--db", url, "--family", "rows", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--family" in result.output and not (tmp_path / "x").exists()
    result = runner.invoke(app, ["db", "check", "--shapes", str(_shapes(tmp_path)), "--file", str(out)])
    assert result.exit_code == 0, result.output


def _shapes(tmp_path):
    path = tmp_path / "block.yaml"
    path.write_text("shapes:\n  - {m: 100, n: 304, k: 528, dtypes: [e4m3], out_dtype: bf16, layout: nt, "
                    "bias: row, scales: block}\n")
    return path


def test_tune_takes_a_shapes_file_of_block_problems(tmp_path, fake_gpu_benchmark):
    url = str(tmp_path / "t.sqlite")
    result = CliRunner().invoke(app, ["tune", "--shapes", str(_shapes(tmp_path)), "--db", url])
    assert result.exit_code == 0, result.output
    with TuningDB(url) as db:
        [stored] = db.winners()
    assert stored.key.scales == "block" and stored.env.kernel_hash == identity.blockscaled_kernel_hash()


@pytest.mark.parametrize("tile, warps, refused", [
    ((128, 64), 4, True), ((128, 128), 4, True), ((64, 256), 4, True),  # NaN / no compile on the H200
    ((128, 128), 8, False), ((64, 256), 8, False), ((64, 128), 4, False), ((16, 256), 4, False),
])
def test_block_tiles_that_failed_on_the_gpu_are_infeasible(tile, warps, refused):
    config = GemmConfig(block_m=tile[0], block_n=tile[1], block_k=128, num_warps=warps, num_stages=2,
                        tma=True)
    reason = config_supports(config, BLOCK, H200)
    assert (reason is not None and "need 8 warps" in reason) == refused, reason
    assert config_supports(config, DENSE, H200) is None  # the dense kernels run them


def test_warmup_runs_a_block_problem_with_its_scales_laid_out_as_tuned(fresh_dispatch, monkeypatch):
    """Warm-up calls scaled_mm on scales in the tuner's layout (stride 1 along M), whose strides the
    compiled kernel is specialized for."""
    import tritonblas
    from tritonblas import warmup

    seen = []
    real = tritonblas.scaled_mm

    def spy(a, b, scale_a, scale_b, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.append((scale_a.stride(0), scale_b.stride(0)))
        return real(a, b, scale_a, scale_b, **kw)

    monkeypatch.setattr(tritonblas, "scaled_mm", spy)
    small = Problem(8, 32, 160, "e4m3", "nt", out_dtype="bf16", scales="block")
    [result] = warmup(problems=[small], progress=False)
    assert result.status == "compiled" and result.config.backend == "triton", result
    assert seen == [(1, 1)]
