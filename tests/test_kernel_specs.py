"""The Triton GEMM kernels' compile-time choices travel as one bundle (kernels/specs.py): each kernel's only
constexpr parameter is `SPEC`, a plan's named choices become it whole, and a name no bundle has is an error
that names it."""

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tritonblas.config import GemmConfig
from tritonblas.kernels import specs
from tritonblas.kernels.blockscaled import blockscaled_gemm_kernel
from tritonblas.kernels.grouped import grouped_gemm_kernel
from tritonblas.kernels.persistent import persistent_gemm_kernel
from tritonblas.kernels.reduce import splitk_reduce_kernel
from tritonblas.kernels.streamk import streamk_gemm_kernel
from tritonblas.launch.gemm import make_plan

ROOT = Path(__file__).resolve().parent.parent
KERNELS = [persistent_gemm_kernel, streamk_gemm_kernel, splitk_reduce_kernel, blockscaled_gemm_kernel,
           grouped_gemm_kernel]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.fn.__name__)
def test_each_kernel_takes_its_choices_as_one_bundle(kernel):
    """SPEC is the last parameter and the only constexpr one; the kernel has a bundle in SPECS."""
    import triton.language as tl

    parameters = inspect.signature(kernel.fn).parameters
    constexpr = [name for name, p in parameters.items() if p.annotation in (tl.constexpr, "tl.constexpr")]
    assert constexpr == ["SPEC"] == list(parameters)[-1:]
    assert kernel.fn.__name__ in specs.SPECS


@pytest.mark.parametrize("streamk", [False, True])
def test_a_plan_names_every_field_its_kernel_reads(streamk):
    """make_plan's choices fill the kernel's bundle (no field left to a default it should have set but
    Stream-K's, which a persistent plan leaves at theirs), in the values the plan chose."""
    a, b, c = torch.empty(64, 96), torch.empty(96, 80), torch.empty(64, 80)
    config = GemmConfig(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2, streamk=streamk)
    plan = make_plan(a, b, c, None, config, 4, "ieee")
    bundle = plan.kwargs["SPEC"]
    assert isinstance(bundle, specs.GemmSpec) and list(plan.kwargs) == ["SPEC"]
    assert bundle._asdict() == {**specs.GemmSpec._field_defaults, **plan.constexprs}
    stream_k = {"FIXUP_CHUNKS", "DEFERRED", "REDUCE"}
    assert set(specs.GemmSpec._fields) - set(plan.constexprs) == (set() if streamk else stream_k)


def test_the_compiler_gets_constexpr_fields_and_the_interpreter_plain_ones():
    """triton 3.6's compiler takes a shape from a bundle's field only as a tl.constexpr; the interpreter's
    arithmetic on a constexpr and a tensor gives a constexpr, so it gets the plain values."""
    import triton.language as tl

    choices = dict(BLOCK_M=128, BLOCK_N=64, GROUP_M=8, HAS_BIAS=False, A_SCALE=0, B_SCALE=0, INT64=False,
                   FIXUP_CHUNKS=4)

    class InterpretedFunction:  # what triton.jit returns under TRITON_INTERPRET=1, by its name
        fn = splitk_reduce_kernel.fn

    compiled = specs.kernel_constexprs(_jit_of(splitk_reduce_kernel), choices)["SPEC"]
    assert all(isinstance(value, tl.constexpr) for value in compiled)
    assert [value.value for value in compiled] == list(specs.ReduceSpec(**choices))
    interpreted = specs.kernel_constexprs(InterpretedFunction(), choices)["SPEC"]
    assert interpreted == specs.ReduceSpec(**choices)
    assert not any(isinstance(value, tl.constexpr) for value in interpreted)


def _jit_of(kernel):
    """A stand-in with the kernel's function whose type is not the interpreter's."""

    class JITFunction:
        fn = kernel.fn

    return JITFunction()


def test_a_choice_no_bundle_has_is_named():
    choices = dict(BLOCK_M=128, BLOCK_N=64, GROUP_M=8, HAS_BIAS=False, A_SCALE=0, B_SCALE=0, INT64=False,
                   FIXUP_CHUNKS=4, SPLITS=3)
    with pytest.raises(ValueError, match="ReduceSpec has no field.*SPLITS"):
        specs.kernel_constexprs(splitk_reduce_kernel, choices)


def test_other_kernels_take_their_choices_as_they_are():
    """The Gluon kernels and the pad copies keep their own constexpr parameters."""
    from tritonblas.kernels.copy import pad_copy_kernel

    assert specs.kernel_constexprs(pad_copy_kernel, {"BLOCK_R": 16}) == {"BLOCK_R": 16}


# What JITFunction.run does with a plan's keyword arguments on a GPU, short of the device: bind them (the
# bundle of tl.constexpr fields), key the kernel cache, pack the compile's signature and compile for sm_90.
# The interpreter never sees the compiler's bundle, so this runs without TRITON_INTERPRET.
GPU_BINDING = textwrap.dedent("""
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import compute_cache_key, create_function_from_signature
    from tritonblas.config import GemmConfig
    from tritonblas.launch.arguments import gemm_args, reduce_args, scale_args
    from tritonblas.launch.gemm import make_plan

    target = GPUTarget("cuda", 90, 128)
    backend = make_backend(target)

    def compile_as_run(plan, args):
        kernel = plan.kernel
        binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        kwargs = dict(plan.kwargs, num_warps=plan.num_warps, num_stages=plan.num_stages, debug=False,
                      instrumentation_mode="")
        bound, specialization, options = binder(*args, **kwargs)
        compute_cache_key({}, specialization, options)
        options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization,
                                                                  options)
        assert signature["SPEC"] == "constexpr", signature
        compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target,
                                  options=options.__dict__)
        print(kernel.fn.__name__, type(list(bound.values())[-1]).__name__, compiled.metadata.shared)

    f16 = dict(dtype=torch.float16)
    a, b, c = torch.empty(256, 512, **f16), torch.empty(512, 384, **f16), torch.empty(256, 384, **f16)
    for streamk in (False, True):
        config = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, streamk=streamk,
                            reduce_kernel=streamk)
        plan = make_plan(a, b, c, None, config, 132, "ieee")
        ws = (torch.empty(1 << 20), torch.empty(64, dtype=torch.int32)) if plan.workspace else ()
        before, after = gemm_args(a, b, c, c, ws, 1.0, 0.0, (None, None), scale_args(None))
        compile_as_run(plan, (*before, *plan.ints, *after))
        if plan.then is not None:
            before, after = reduce_args(ws[0], c, c, 1.0, 0.0, scale_args(None))
            compile_as_run(plan.then, (*before, *plan.then.ints, *after))
""")


@pytest.mark.skipif(sys.platform != "linux", reason="triton ships ptxas for Linux")
def test_a_plans_bundle_passes_tritons_own_binding_for_a_gpu():
    """The persistent, Stream-K and reduce kernels' bundles (tl.constexpr fields) go through triton's
    binder, cache key and compile as `kernel[grid](...)` on a GPU takes them."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-c", GPU_BINDING], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    kernels = [line.split()[:2] for line in run.stdout.splitlines()]
    assert kernels == [["persistent_gemm_kernel", "GemmSpec"], ["streamk_gemm_kernel", "GemmSpec"],
                       ["splitk_reduce_kernel", "ReduceSpec"]], run.stdout
