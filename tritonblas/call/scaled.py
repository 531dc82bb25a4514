"""The public op scaled_mm: torch._scaled_mm's quantized GEMM (fp8 or int8 operands, fp32 scales).

`(a * scale_a) @ (b * scale_b) + bias`, accumulated in fp32 (int32 for int8), scaled, biased, saturated
(fp8 outputs) and cast once, in the kernels' one epilogue (kernels/common.epilogue). As the other ops, a
call looks its signature up in the one plan cache (call.path) and checks its arguments only on a miss;
run_scaled (call.run) launches the plan, or torch's own kernels (backend "torch"). A call without options
asks the C++ front first (call.front), which runs torch._scaled_mm for a key the Python path answered
"torch's op" before.
"""

from __future__ import annotations

import torch

from tuning_db.vocabulary import QUANT_DTYPES, QUANT_OUT_DTYPES

from .. import caches
from ..config import GemmConfig, fp8_refusal, torch_blockwise_fits, vendor_scaled_refusal
from ..device import tensor_device_info
from ..launch.native import config_has_record
from ..launch.prepared import prepare_launch
from ..problem import SCALE_VECTORS, Problem, block_scale_shapes
from ..selection import dispatch
from ..validate import DTYPE_NAMES, TORCH_DTYPE_OF, check_options
from . import front
from . import path as call_path
from .path import ScaledPlan, is_compiling, layout_of, lookup, plans, signature
from .run import run_scaled, scale_vector, torch_runs

QUANT_TORCH: dict[torch.dtype, str] = {t: name for t, name in DTYPE_NAMES.items() if name in QUANT_DTYPES}
OUT_TORCH: dict[torch.dtype, str] = {t: name for t, name in DTYPE_NAMES.items() if name in QUANT_OUT_DTYPES}
_BIAS_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# (A's scale is a vector, B's is) -> Problem.scales
_SCALE_MODES = {vectors: mode for mode, vectors in SCALE_VECTORS.items()}


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
              use_fast_accum: bool = False, out: torch.Tensor | None = None, backend: str | None = None,
              config: GemmConfig | None = None) -> torch.Tensor:
    """As torch._scaled_mm: (a * scale_a) @ (b * scale_b) + bias, one cast to out_dtype.

    a (M, K) and b (K, N): float8_e4m3fn / float8_e5m2 (any mix) or both int8, any layout. scale_a:
    float32 of shape () or (1, 1) (one value) or (M, 1) (one per row of a); scale_b: () or (1, 1), or
    (1, N) (one per column of b). Block-wise (fp8 only, DeepSeek-V3's convention): scale_a (M, ceil(K/128))
    per 1x128 block of a's rows and scale_b (ceil(K/128), ceil(N/128)) per 128x128 block of b, any
    strides; the result sums each K block's product times its scales in fp32. bias: None or (N,) in
    bf16, fp16 or fp32. out_dtype: bf16, fp16, fp32, float8_e4m3fn or float8_e5m2 (saturated: a finite
    result never becomes inf or NaN); default a's dtype for fp8 operands (torch's), bf16 for int8.
    use_fast_accum: fp8 accumulation left to the tensor cores (faster, less accurate; False promotes to
    fp32 as cuBLAS does). backend, config: as matmul's.
    No derivative (as torch._scaled_mm): the result of operands that need grad raises on backward.
    """
    if front.scaled_mm is not None and backend is None and config is None and not is_compiling():
        y = front.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out)
        if y is not None:
            return y
    plan = plan_scaled(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out, backend, config)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or scale_a.requires_grad or
                                    scale_b.requires_grad or bias is not None and bias.requires_grad):
        if out is not None:
            raise RuntimeError("scaled_mm(): functions with out=... arguments don't support automatic "
                               "differentiation, but one of the arguments requires grad")
        return _NoDerivative.apply(plan, a, b, scale_a, scale_b, bias)
    # (later calls of the key may be answered in C++, by torch._scaled_mm or its block-wise op)
    if plan.problem.scales == "block":
        y = run_scaled(plan, a, b, scale_a, scale_b, bias, out)
        if bias is None and out is None:  # (after the call: cuBLASLt may refuse it, then the kernel runs)
            front.remember_block(plan, a, b, scale_a, scale_b, out_dtype, use_fast_accum)
        return y
    if torch_runs(plan):
        front.remember_scaled(plan, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out)
    return run_scaled(plan, a, b, scale_a, scale_b, bias, out)


def plan_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                bias: torch.Tensor | None, out_dtype: torch.dtype | None, use_fast_accum: bool,
                out: torch.Tensor | None = None, backend: str | None = None,
                config: GemmConfig | None = None) -> ScaledPlan:
    """The call's plan: found by its signature in the one plan cache, else checked and made (and stored).
    scaled_mm runs it; transparent mode asks it whether torch's own kernel is what runs."""
    key = None  # (an option of the wrong type: planned every time, the checks raise)
    if (out_dtype is None or type(out_dtype) is torch.dtype) and type(use_fast_accum) is bool:
        op = ("scaled_mm", out_dtype, use_fast_accum, _facts(scale_a), _facts(scale_b))
        key = signature(op, None, backend, config, a, b, bias, out, autograd=False)
    return lookup(key, a, b, bias, out) or _plan(key, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum,
                                                 out, backend, config)


def _facts(t: object) -> tuple:
    """What a scale adds to the call's signature (the kernels read its values); a non-tensor's type
    alone (no plan is stored for it: the checks raise)."""
    if isinstance(t, torch.Tensor):
        return type(t), t.shape, t.stride(), t.dtype, t.device
    return (type(t),)


class _NoDerivative(torch.autograd.Function):
    """The result of operands that need grad, as torch's op without a derivative formula gives it: it
    requires grad, and its backward raises (instead of gradients silently missing)."""

    @staticmethod
    def forward(ctx, plan, a, b, scale_a, scale_b, bias):  # noqa: ANN001, ANN205 (autograd's API)
        return run_scaled(plan, a, b, scale_a, scale_b, bias, None)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        raise RuntimeError("derivative for tritonblas.scaled_mm is not implemented (as for aten::_scaled_mm)")


# --- the checks and the plan of a new signature ---------------------------------------------------------

def _plan(key, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out, backend, config) -> ScaledPlan:  # noqa: ANN001
    """Every check (each names its argument; nothing is written before they pass), then the plan."""
    m, k, n = _check_operands(a, b)
    scales = _scale_mode(scale_a, scale_b, a, m, n, k)
    if bias is not None:
        _check_bias(bias, a, n)
    out_name = _check_out_dtype(out_dtype, out, a)
    if out is not None:
        _check_out_tensor(out, m, n, a, b, scale_a, scale_b, bias)
    if type(use_fast_accum) is not bool:
        raise TypeError(f"use_fast_accum must be True or False, got {use_fast_accum!r}")
    check_options(None, config, backend)
    b_name = QUANT_TORCH[b.dtype]
    problem = Problem(m, n, k, QUANT_TORCH[a.dtype], layout_of(a, b), "none" if bias is None else "row",
                      out_name, None if b.dtype == a.dtype else b_name, scales)
    if backend == "torch" or (config is not None and config.is_vendor):
        refusal = vendor_scaled_refusal(problem, tensor_device_info(a))
        if refusal is not None:  # (as torch._scaled_mm would raise: before anything is written)
            raise ValueError(f"backend 'torch' cannot run {problem.short()}: {refusal}")
    return _prepare(key, problem, a, b, scale_a, scale_b, bias, out, use_fast_accum, backend, config)


def _prepare(key, problem: Problem, a, b, scale_a, scale_b, bias, out, use_fast_accum: bool, backend,  # noqa: ANN001
             config: GemmConfig | None) -> ScaledPlan:
    read_at = caches.generation()  # before anything is selected
    device = tensor_device_info(a)  # raises for tensors no kernel can take
    refusal = fp8_refusal(problem, device)
    if refusal is not None:
        raise RuntimeError(f"a and b are {problem.dtype}/{problem.b} on {a.device}: {refusal}")
    user_config = config is not None
    selection = None
    if user_config:
        dispatch.check_user_config(config, problem, device)
    elif problem.m and problem.n:
        selection = dispatch.select_problem(problem, device=device, backend=backend)
        config = selection.config
        if use_fast_accum and config.gluon and backend is None and vendor_scaled_refusal(problem) is None:
            # The Gluon kernel promotes whatever the call asks (the tuner timed accurate calls): against
            # torch's fast mode it read 0.92x-0.99x on the tuned problems (H200, kernel-levers F8).
            config = GemmConfig.vendor()
    plan = ScaledPlan(problem.m, problem.n, problem.k, problem, device, config, (None, backend), user_config,
                      False, (0, 0, 0, 0), has_bias=bias is not None, precision="tf32",
                      out_dtype=TORCH_DTYPE_OF[problem.out], fast_acc=use_fast_accum)
    if out is not None:
        plan.spans = _spans(out, a, b, bias)
    plan.torch_blockwise = torch_blockwise_fits(problem, device.arch)
    if config is not None and config.backend != "torch" and problem.scales != "block":  # (run_scaled's own)
        c = out if out is not None else \
            torch.empty((problem.m, problem.n), dtype=plan.out_dtype, device="meta")  # strides only
        bias2d = None if bias is None else torch.broadcast_to(bias, (problem.m, problem.n))
        # (a Gluon launch is launch.blockscaled's, its descriptors built per call: no prepared launch)
        plan.launch = None if config.gluon else \
            prepare_launch(a, b, c, bias2d, config, device.sm_count, plan.precision,
                           (scale_vector(scale_a), scale_vector(scale_b)), use_fast_accum)
        # As the plain ops' (call.path.prepare): a kernel that wins by less than its host cost above torch's
        # runs under graph capture only, where torch takes the problem at all.
        if selection is not None and backend is None and vendor_scaled_refusal(problem) is None:
            plan.eager_vendor = call_path.eager_vendor(selection, plan.launch)
            recordable = a.is_cuda and config_has_record(config)
            plan.routed_eager_vendor = (call_path.eager_vendor(selection, plan.launch, True),
                                        call_path.eager_vendor(selection, plan.launch, True, recordable))
    call_path.note(plan)  # as every planned call: a new problem goes to the file recorded now
    if key is not None:
        caches.store(read_at, plans, key, plan)
    return plan


def _spans(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> tuple:
    from ..validate import span_bytes

    return span_bytes(out), span_bytes(a), span_bytes(b), 0 if bias is None else span_bytes(bias)


def _check_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided or t.is_nested:
        raise TypeError(f"{name} must be a dense (strided) tensor")
    return t


def _check_operands(a: object, b: object) -> tuple[int, int, int]:
    for name, t in (("a", a), ("b", b)):
        _check_tensor(name, t)
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in QUANT_TORCH:
            raise TypeError(f"{name} has dtype {t.dtype}; scaled_mm takes float8_e4m3fn, float8_e5m2 or int8")
    if (a.dtype == torch.int8) != (b.dtype == torch.int8):
        raise TypeError(f"b has dtype {b.dtype} but a has {a.dtype}: int8 multiplies int8 only, fp8 any fp8")
    if b.device != a.device:
        raise ValueError(f"b is on {b.device} but a is on {a.device}; they must match")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)} and b is {tuple(b.shape)}")
    return a.shape[0], a.shape[1], b.shape[1]


def _scale_mode(scale_a: object, scale_b: object, a: torch.Tensor, m: int, n: int, k: int) -> str:
    """The scales' checks; their mode (Problem.scales), told by their shapes: one value, () or (1, 1);
    one per row of a, (M, 1) / column of b, (1, N); else block-wise, (M, ceil(K/128)) and
    (ceil(K/128), ceil(N/128)). Where the shapes fit both (K <= 128: one K block) the tensor- or row-wise
    mode is taken: one scale per row of a and per 128 columns of b over the whole of K is the same
    product (tests/test_scaled_block.py checks it)."""
    for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        _check_tensor(name, scale)
        if scale.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {scale.dtype}")
        if scale.device != a.device:
            raise ValueError(f"{name} is on {scale.device} but a is on {a.device}; they must match")
    one = ((), (1, 1))
    shape_a, shape_b = tuple(scale_a.shape), tuple(scale_b.shape)
    vec_a, vec_b = shape_a not in one and shape_a == (m, 1), shape_b not in one and shape_b == (1, n)
    if (vec_a or shape_a in one) and (vec_b or shape_b in one):
        return _SCALE_MODES[vec_a, vec_b]
    block_a, block_b = block_scale_shapes(m, n, k)
    if shape_a == block_a and shape_b == block_b:
        if a.dtype == torch.int8:
            raise TypeError("scale_a and scale_b are block-wise (1x128 and 128x128 blocks), which take fp8 "
                            "operands; a and b are int8")
        return "block"
    # The scale at fault: one of no mode's shape, else the one that does not match the other's mode.
    fits_a, fits_b = shape_a in (*one, (m, 1), block_a), shape_b in (*one, (1, n), block_b)
    name, shape = ("scale_a", shape_a) if not fits_a or (fits_b and shape_b == block_b) else \
        ("scale_b", shape_b)
    forms = f"(), (1, 1) or {(m, 1) if name == 'scale_a' else (1, n)}"
    block = block_a if name == "scale_a" else block_b
    raise ValueError(f"{name} must have shape {forms} (tensor- or row-wise), or {block} with the other "
                     f"scale block-wise too (1x128 blocks of a's rows, 128x128 blocks of b), got {shape}")


def _check_bias(bias: object, a: torch.Tensor, n: int) -> None:
    _check_tensor("bias", bias)
    if bias.dtype not in _BIAS_DTYPES:
        raise TypeError(f"bias must be bfloat16, float16 or float32, got {bias.dtype}")
    if tuple(bias.shape) != (n,):
        raise ValueError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
    if bias.device != a.device:
        raise ValueError(f"bias is on {bias.device} but a is on {a.device}; they must match")


def _check_out_dtype(out_dtype: object, out: object, a: torch.Tensor) -> str:
    """The output dtype's name, from out_dtype, else out's dtype, else the default (a's for fp8, bf16 for
    int8); out= checked against it."""
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype, got {type(out_dtype).__name__}")
    if out is not None:
        _check_tensor("out", out)
        if out_dtype is not None and out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}; they must match")
        out_dtype = out.dtype
    if out_dtype is None:
        out_dtype = torch.bfloat16 if a.dtype == torch.int8 else a.dtype
    if out_dtype not in OUT_TORCH:
        raise (TypeError if out is not None else ValueError)(
            f"{'out' if out is not None else 'out_dtype'} must be bfloat16, float16, float32, float8_e4m3fn "
            f"or float8_e5m2, got {out_dtype}")
    return OUT_TORCH[out_dtype]


def _check_out_tensor(out: torch.Tensor, m: int, n: int, a: torch.Tensor,
                      *inputs: torch.Tensor | None) -> None:
    """out's shape and device, and no byte of it shared with itself or an input (b, scales, bias)."""
    from ..validate import check_disjoint, has_internal_overlap

    if tuple(out.shape) != (m, n):
        raise ValueError(f"out must have shape ({m}, {n}), got {tuple(out.shape)}")
    if out.device != a.device:
        raise ValueError(f"out is on {out.device} but a is on {a.device}; they must match")
    if not out.is_contiguous() and has_internal_overlap(out):
        raise ValueError("out has internal overlap (an expanded view): each element must be distinct")
    if out.numel() == 0:
        return
    storage = out.untyped_storage().data_ptr()
    for name, t in zip(("a", "b", "scale_a", "scale_b", "bias"), (a, *inputs), strict=True):
        if t is not None and t.untyped_storage().data_ptr() == storage:
            check_disjoint(out, name, t)
