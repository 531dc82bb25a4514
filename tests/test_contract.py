"""The Python/C++ contract (tritonblas/contract.py): the header the C++ side reads is the one the module
writes, no C++ source or Python module holds a second copy of its values, and the built library and
the C++ branch compiled only where torch has CUDA agree with it."""

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tritonblas import caches, contract, native
from tritonblas.launch import gemm, scratch

ROOT = Path(__file__).resolve().parents[1]
NAMES = [name for _, names in (*contract.ENUMS, *contract.CONSTANTS) for name in names]


def test_the_header_is_the_one_contract_py_writes():
    """Fails after an edit of contract.py until `python -m tritonblas.contract` rewrites the header."""
    assert contract.HEADER.read_text() == contract.header()


def test_the_header_holds_every_value(tmp_path):
    text = contract.header()
    for name in NAMES:
        assert re.search(rf"\b{name} = {getattr(contract, name)}\b", text), name
    target = tmp_path / "contract.h"
    assert contract.write(target) and not contract.write(target)  # written once, then unchanged
    assert target.read_text() == text


def test_no_cpp_source_defines_a_shared_name_again():
    """A constexpr or an enumerator of a contract name anywhere but contract.h is a second copy."""
    sources = [p for p in (ROOT / "tritonblas" / "native").iterdir()
               if p.suffix in (".cpp", ".h") and p.name != "contract.h"]
    assert {p.name for p in sources} >= {"route.cpp", "launch.cpp", "front.cpp", "answers.h", "launch.h"}
    for path in sources:
        text = path.read_text()
        for name in NAMES:
            assert not re.search(rf"(constexpr[^;=(]*\b{name}\s*=|[{{,]\s*{name}\s*=)", text), \
                (path.name, name)


def test_no_python_module_assigns_a_shared_name():
    """Python modules import the contract's names; none binds one to a value of its own."""
    for path in (ROOT / "tritonblas").rglob("*.py"):
        if path.name == "contract.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                bound = [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]
                assert not set(bound) & set(NAMES), (path.relative_to(ROOT), bound)


def test_the_caps_python_keeps_are_the_contracts():
    """launch.gemm's plan cache keeps its own name (its module is hashed planning code's): checked here."""
    assert caches.CAP == gemm._PLANS_CAP == contract.CACHE_CAP
    assert scratch.CAP_BYTES == contract.POOL_CAP_BYTES


def test_enumerations_are_dense_from_zero():
    """launch.cpp's parse_launch takes a kind in [P_A, P_SCALE_B] as valid: the kinds leave no gap."""
    for _, names in contract.ENUMS:
        assert [getattr(contract, name) for name in names] == list(range(len(names)))


def test_the_built_front_exports_the_contracts_codes():
    if not native.load() or native.front() is None:
        pytest.skip(f"no C++ front here: {native.why_not()}")
    front = native.front()
    for name in ("MATMUL", "ADDMM", "ADDMM0", "LINEAR", "SCALED_MM", "SCALED_MM_BLOCK", "TORCH",
                 "EAGER_TORCH"):
        assert getattr(front, name) == getattr(contract, name), name


# torch's own extension builds use C++17 up to 2.11 and C++20 from 2.12 (native.cxx_standard): the sources
# are checked under both, C++17 where this torch's headers still compile as C++17 (2.14's need C++20).
@pytest.mark.parametrize("standard", ["c++17", "c++20"])
def test_the_cuda_branch_compiles_against_the_contract(standard):
    """route.cpp's -DTRITONBLAS_CUDA code (the kernels at the CUDA key) is built only where torch has
    CUDA; a CPU box's torch ships the headers it includes, so its syntax (and the other sources') is
    checked here, in each C++ standard a supported torch builds with."""
    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler")
    if standard == "c++17" and torch.torch_version.TorchVersion(torch.__version__) >= (2, 14):
        pytest.skip(f"torch {torch.__version__}'s headers compile only as C++20")
    cxx, flags, sources, _ = native.command(cuda=True)
    assert "-DTRITONBLAS_CUDA" in flags
    assert f"-std={native.cxx_standard(torch.__version__)}" in flags
    flags = [f for f in flags if f not in ("-shared", "-fPIC", "-O2") and not f.startswith("-std=")]
    done = subprocess.run([cxx, "-fsyntax-only", f"-std={standard}", *flags, *map(str, sources)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("version, standard", [("2.10.0", "c++17"), ("2.11.0+cu130", "c++17"),
                                               ("2.12.0", "c++20"), ("2.13.0+cpu", "c++20"),
                                               ("2.14.1+cu130", "c++20"), ("2.15.0", "c++20")])
def test_the_cpp_standard_is_torchs_own(version, standard):
    assert native.cxx_standard(version) == standard


def test_torchs_block_wise_scaling_codes_are_the_contracts():
    """The front passes F.scaled_mm's BlockWise1x128 / BlockWise128x128 codes to aten::_scaled_mm_v2 as
    numbers: torch's, where this torch has them."""
    scaling = getattr(torch.nn.functional, "ScalingType", None)
    if scaling is None:
        pytest.skip("this torch has no block-wise scaled mm")
    assert int(scaling.BlockWise1x128.value) == contract.BLOCKWISE_1X128
    assert int(scaling.BlockWise128x128.value) == contract.BLOCKWISE_128X128
