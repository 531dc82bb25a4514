"""The grouped GEMM's shipped winners gate CI as the dense ones do, and its kernel compiles for sm_90.

configs/grouped/sm_90.json (tuned under triton 3.6.0) and sm_90-triton-3.9.0.json must validate, be of
the running grouped kernel (its hash: a kernel change needs `python scripts/grouped_bench.py --shapes
scripts/classes/grouped.yaml --tune ...` on an H200, under each triton), cover every entry of
scripts/classes/grouped.yaml, and read back to the same bytes they were written as; dispatch reads the
running triton's.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tritonblas.arch import device_for_arch
from tritonblas.grouped import select as select_module
from tritonblas.grouped import tune, usertable
from tritonblas.grouped.select import (
    grouped_supports,
    select,
    shipped_table,
    smem_estimate,
    table_for,
)
from tritonblas.identity import grouped_kernel_hash, triton_version
from tritonblas.shapes import load_grouped

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "configs" / "grouped" / "sm_90.json"
# (the table, the triton it was tuned under)
TABLES = [(SHIPPED, "3.6.0"), (ROOT / "configs" / "grouped" / "sm_90-triton-3.9.0.json", "3.9.0")]
CLASS = ROOT / "scripts" / "classes" / "grouped.yaml"
H200 = device_for_arch("sm_90")


@pytest.mark.parametrize("path, triton", TABLES, ids=[t for _, t in TABLES])
def test_each_shipped_table_is_of_the_running_kernel_and_its_triton(path, triton):
    doc = json.loads(path.read_text())
    assert doc["kernel_hash"] == grouped_kernel_hash(), (
        f"{path.name} is stale: the grouped kernel changed; re-tune it on an H200 with "
        "scripts/grouped_bench.py --tune"
    )
    assert doc["triton"] == triton and doc["arch"] == "sm_90"


@pytest.mark.parametrize("path, triton", TABLES, ids=[t for _, t in TABLES])
def test_every_shipped_winner_runs_on_its_arch(path, triton):
    table = usertable.read_table(path)
    assert table
    for key, config in table.items():
        ok, why = grouped_supports(config, key, H200)
        assert ok, f"{path.name} {key.text()}: {why}"


@pytest.mark.parametrize("running, name", [("3.9.0", "sm_90-triton-3.9.0.json"), ("3.6.0", "sm_90.json"),
                                           ("3.7.1", "sm_90.json")])
def test_dispatch_reads_the_table_of_the_running_triton(running, name, monkeypatch):
    """A table tuned under the running triton where one ships, else the default one."""
    assert table_for(SHIPPED.parent, "sm_90", running).name == name
    monkeypatch.setattr("tritonblas.identity.triton_version", lambda: running)
    select_module.clear_cache()
    try:
        assert shipped_table("sm_90") == usertable.read_table(SHIPPED.parent / name)
    finally:
        monkeypatch.undo()
        select_module.clear_cache()


@pytest.mark.parametrize("entry", load_grouped(CLASS), ids=lambda e: e.text())
def test_every_class_entry_has_a_shipped_winner(entry):
    selection = select(tune.entry_key(entry), H200)
    assert selection.source == "shipped", f"{entry.text()}: {selection.source}"


@pytest.mark.parametrize("path, triton", TABLES, ids=[t for _, t in TABLES])
def test_the_file_reads_back_to_its_bytes(path, triton, tmp_path):
    doc = json.loads(path.read_text())
    meta = {k: v for k, v in doc.items() if k not in ("arch", "winners")}
    out = tmp_path / "again.json"
    usertable.write_table(out, doc["arch"], usertable.read_table(path), meta)
    assert out.read_text() == path.read_text()


COMPILE = textwrap.dedent("""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from tritonblas.kernels.grouped import grouped_gemm_kernel as k
    from tritonblas.kernels.specs import kernel_constexprs
    for tma, jag in [(True, 1), (True, 0), (True, 2), (False, 1), (False, 3)]:
        bm, bn, bk = 128, 256, 64
        ce = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, JAGGED=jag, TAIL=int(jag in (1, 2)),
                  HAS_BIAS=jag == 1, PRECISION="tf32", USE_TMA=tma, A_COL=False, B_COL=True, A_DIV=8,
                  B_DIV=8, EVEN_K=jag != 3, INT64=False, E_PAD=256)
        ce = kernel_constexprs(k, ce)
        sig, consts = {}, {(k.arg_names.index(n),): v for n, v in ce.items()}
        for n in k.arg_names:
            if n in ce:
                sig[n] = "constexpr"
            elif n in ("a_desc", "b_desc"):
                box = f"{bm}, {bk}" if n == "a_desc" else f"{bn}, {bk}"
                sig[n] = f"tensordesc<bf16[{box}]>" if tma else "constexpr"
                if not tma:
                    consts[(k.arg_names.index(n),)] = None
            else:
                sig[n] = "*i32" if n == "offs_ptr" else "*bf16" if n.endswith("_ptr") else "i32"
        c = triton.compile(ASTSource(k, sig, constexprs=consts), target=GPUTarget("cuda", 90, 128),
                           options=dict(num_warps=8, num_stages=3))
        print(tma, jag, c.metadata.shared)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="triton ships ptxas for Linux")
def test_the_grouped_kernel_compiles_for_sm_90():
    """Every form, TMA and pointer paths; the shared memory estimate bounds what triton allocates."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.split("\n")[:-1]
    assert len(lines) == 5, run.stdout
    from tritonblas.config import GemmConfig

    bound = smem_estimate(GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3), "bf16")
    for line in lines:
        assert 0 < int(line.split()[-1]) <= bound <= H200.smem_per_block, line


# (rows, N, K, groups, the source dispatch takes it from); which backend that source holds depends on the
# running triton's table
EXPLAINED = [
    (32768, 1536, 2048, 128, "shipped"),
    (8192, 4096, 14336, 8, "shipped"),
    (4096, 1536, 2048, 128, "neighbor"),
    (4096, 1536, 2048, 96, "heuristic"),
    (32768, 2048, 768, 128, "shipped"),  # a Gluon pick in both tritons' tables
    (32768, 1536, 2048, 96, "heuristic"),  # the heuristic's Gluon tile
]


@pytest.mark.parametrize("m, n, k, groups, source", EXPLAINED)
def test_explain_says_what_a_grouped_gemm_runs(m, n, k, groups, source, monkeypatch):
    import torch
    from typer.testing import CliRunner

    from tritonblas.cli import app
    from tritonblas.grouped.forms import GroupedShape
    from tritonblas.grouped.select import key_of

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = CliRunner().invoke(app, ["explain", str(m), str(n), str(k), "--groups", str(groups), "--layout",
                                      "nt", "--arch", "sm_90"])
    assert result.exit_code == 0, result.output
    shape = GroupedShape(form="2d3d", groups=groups, m=m, n=n, k=k, out_shape=(m, n))
    selection = select(key_of(shape, torch.bfloat16, False, True), H200)
    assert selection.source == source
    assert f"source:   {source}" in result.output, result.output
    assert f"backend:  {selection.backend}" in result.output, result.output
    assert ("the Gluon grouped kernel" in result.output) == selection.config.gluon, result.output
    assert ("torch's kernel from C++" in result.output) == (selection.backend == "torch"), result.output
    if source == "shipped":
        assert table_for(SHIPPED.parent, "sm_90", triton_version()).name in result.output


def test_explain_refuses_a_grouped_quantized_problem():
    from typer.testing import CliRunner

    from tritonblas.cli import app

    result = CliRunner().invoke(app, ["explain", "64", "32", "32", "--groups", "4", "--dtype", "e4m3",
                                      "--arch", "sm_90"])
    assert result.exit_code != 0 and "--dtype" in result.output


@pytest.mark.parametrize("path, triton", TABLES, ids=[t for _, t in TABLES])
def test_the_untuned_grouped_shapes_stay_untuned(path, triton):
    """scripts/untuned_grouped.yaml shows what dispatch's neighbour and heuristic rules give models nobody
    tuned: a shipped table holding one of its keys would hide that."""
    held = usertable.read_table(path)
    entries = load_grouped(ROOT / "scripts" / "untuned_grouped.yaml")
    assert len(entries) == 14
    tuned = [e.text() for e in entries if tune.entry_key(e) in held]
    assert tuned == [], f"{path.name} holds keys of scripts/untuned_grouped.yaml: {tuned}"
