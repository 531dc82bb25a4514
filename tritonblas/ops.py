"""Public ops (matmul, addmm, linear) on one core op, `tritonblas::gemm`.

The core op is a torch.library custom op, so torch.compile(fullgraph=True) sees one opaque node and
autograd uses the library's own kernels for the backward GEMMs. Eager calls that need no autograd skip
the custom-op dispatcher and call the implementation directly: that layer costs ~10 us per call, more
than the whole budget for host overhead. A call repeating the tensor facts of one that passed every
check skips them (_key, _hits: the per-call cache above the public ops).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from . import dispatch
from .config import BACKENDS, INTERPRETER_DEVICE, DeviceInfo, GemmConfig
from .device import interpreter_enabled, tensor_device_info
from .launch import is_out_of_resources, launch_gemm
from .validate import (
    TORCH_DTYPES,
    check_bias,
    check_operands,
    check_options,
    check_out,
    check_scalar,
    check_tensor,
    span_bytes,
)

# (enable_streamk, backend) <-> the custom op's `family` int (its schema has no Optional[bool]). A
# family restriction already means the kernels, so (False, "triton") is (False, None).
_FAMILY = {(None, None): -1, (False, None): 0, (True, None): 1, (None, "triton"): 2, (None, "torch"): 3,
           (False, "triton"): 0, (True, "triton"): 1}
_RESTRICTION = {-1: (None, None), 0: (False, None), 1: (True, None), 2: (None, "triton"), 3: (None, "torch")}
# A dispatched config that triton cannot compile (out of shared memory) is reported and the next one
# selected, this many times at most (tests/test_dispatch_fallback.py).
_MAX_COMPILE_FALLBACKS = 8
_BIAS_KINDS = {(False, False): "scalar", (False, True): "row", (True, False): "column", (True, True): "full"}
# What torch.backends.cuda.matmul.allow_tf32 returns, without its module __getattr__: 0.65 -> 0.05 us.
_allow_tf32 = torch._C._get_cublas_allow_tf32


# The custom op's schema takes the config as list[int]: every GemmConfig field in declaration order
# (bools as 0/1, grid None as 0, backend as its index in BACKENDS), so a field added to GemmConfig
# cannot be dropped on the way.
_CONFIG_FIELDS = tuple(GemmConfig.model_fields)
_BOOL_FIELDS = frozenset(f for f, info in GemmConfig.model_fields.items() if info.annotation is bool)


def _config_to_list(config: GemmConfig | None) -> list[int]:
    if config is None:
        return []
    return [BACKENDS.index(config.backend) if f == "backend" else int(getattr(config, f) or 0)
            for f in _CONFIG_FIELDS]


def _config_from_list(values: list[int]) -> GemmConfig | None:
    return _config_from_tuple(tuple(values)) if values else None


@functools.lru_cache(maxsize=1024)
def _config_from_tuple(values: tuple[int, ...]) -> GemmConfig:
    """Cached: validating a GemmConfig costs ~5 us, paid once per distinct config."""
    fields = dict(zip(_CONFIG_FIELDS, values, strict=True))
    fields = {f: bool(v) if f in _BOOL_FIELDS else v for f, v in fields.items()}
    fields["grid"] = fields["grid"] or None
    fields["backend"] = BACKENDS[fields["backend"]]
    return GemmConfig(**fields)


def _layout(a: torch.Tensor, b: torch.Tensor) -> str:
    """'n' for a row-major operand (unit stride along K for A, along N for B), 't' for column-major."""
    a0, a1 = a.stride()  # one stride() each: 0.43 -> 0.25 us
    b0, b1 = b.stride()
    return ("t" if a1 != 1 and a0 == 1 else "n") + ("t" if b1 != 1 and b0 == 1 else "n")


def _bias_kind(bias: torch.Tensor | None, m: int, n: int) -> str:
    if bias is None:
        return "none"
    shape = bias.shape
    if len(shape) == 1:  # the common (N,) bias without building a padded shape: 0.55 -> 0.25 us
        return "row" if shape[0] == n and n != 1 else "scalar"
    shape = (1,) * (2 - len(shape)) + tuple(shape)
    return _BIAS_KINDS[shape[0] == m and m != 1, shape[1] == n and n != 1]


def _run(a: torch.Tensor, b: torch.Tensor, m: int, n: int, k: int, bias: torch.Tensor | None, beta: float,
         alpha: float, enable_streamk: bool | None, config: GemmConfig | None, out: torch.Tensor,
         backend: str | None = None) -> None:
    if beta == 0.0:
        bias = None  # as torch.addmm: with beta == 0 the input is ignored, NaN/inf in it included
    info = tensor_device_info(a)  # first: it raises for tensors no kernel can take, empty ones too
    if config is None and (m == 0 or n == 0):
        return  # empty output: nothing to launch, and the heuristic has no tiles to rank
    dtype = a.dtype
    bias2d = None if bias is None else torch.broadcast_to(bias, (m, n))
    precision = "tf32" if dtype is not torch.float32 or _allow_tf32() else "ieee"
    if config is not None:
        dispatch.check_user_config(config, m, n, k, TORCH_DTYPES[dtype], info, _layout(a, b))
        _launch(a, b, out, bias2d, alpha, beta, config, info.sm_count, precision)
        return
    problem_key = _problem_key(a, b, m, n, k, bias)
    config = dispatch.select_config(problem_key, info, enable_streamk, backend)
    _launch_selected(a, b, out, bias2d, alpha, beta, config, problem_key, info, (enable_streamk, backend),
                     precision)


def _launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias2d: torch.Tensor | None, alpha: float,
            beta: float, config: GemmConfig, sm_count: int, precision: str) -> None:
    """The kernels, or for a torch-backend config the vendor GEMM (_vendor_gemm)."""
    if config.backend == "torch":
        _vendor_gemm(a, b, out, bias2d, alpha, beta)
    else:
        launch_gemm(a, b, out, bias2d, alpha, beta, config, sm_count, precision)


def _vendor_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias2d: torch.Tensor | None,
                 alpha: float, beta: float) -> None:
    """torch.mm / torch.addmm with the kernels' contract: out = alpha * (a @ b) + beta * bias in a's
    dtype (bias None: no bias term, as with beta == 0; K = 0 gives beta * bias). torch honours
    allow_tf32 for fp32 as the kernels' precision does."""
    if bias2d is not None:
        torch.addmm(bias2d, a, b, beta=beta, alpha=alpha, out=out)
    elif alpha == 1.0:
        torch.mm(a, b, out=out)
    else:  # beta=0: out is not read (torch.addmm ignores its input then, NaN included)
        torch.addmm(out, a, b, beta=0.0, alpha=alpha, out=out)


def _problem_key(a: torch.Tensor, b: torch.Tensor, m: int, n: int, k: int,
                 bias: torch.Tensor | None) -> tuple:
    """The dispatch key of a checked call; `bias` None when there is none or beta == 0."""
    kind = "none" if bias is None else _bias_kind(bias, m, n)
    return (m, n, k, TORCH_DTYPES[a.dtype], _layout(a, b), kind)


def _launch_selected(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias2d: torch.Tensor | None,
                     alpha: float, beta: float, config: GemmConfig, problem_key: tuple, info: DeviceInfo,
                     restriction: tuple, precision: str) -> None:
    """restriction: (enable_streamk, backend) of the call, for the next selection on a fall-back."""
    try:  # free when nothing is raised (zero-cost exceptions): the hot path pays nothing for it
        # _launch inlined: one frame less on the hot path (~0.1 us).
        if config.backend == "torch":
            _vendor_gemm(a, b, out, bias2d, alpha, beta)
        else:
            launch_gemm(a, b, out, bias2d, alpha, beta, config, info.sm_count, precision)
    except Exception as exc:
        _fall_back(exc, config, problem_key, info, restriction, (a, b, out, bias2d, alpha, beta), precision)


def _fall_back(exc: Exception, config: GemmConfig, key: tuple, info, restriction: tuple, args: tuple,
               precision: str) -> None:
    """A dispatched config triton cannot compile is reported (never selected again for this problem)
    and the next selection runs; other errors propagate."""
    for _ in range(_MAX_COMPILE_FALLBACKS):
        if not is_out_of_resources(exc):
            raise exc
        dispatch.report_compile_failure(key, info, config, exc)
        config = dispatch.select_config(key, info, *restriction)
        try:
            _launch(*args, config, info.sm_count, precision)
            return
        except Exception as again:
            exc = again
    m, n, k, dtype = key[:4]
    raise RuntimeError(f"tritonblas: {_MAX_COMPILE_FALLBACKS + 1} selected configs in a row could not be "
                       f"compiled for {m}x{n}x{k} {dtype} on {info.name}; pass config= explicitly") from exc


@torch.library.custom_op("tritonblas::gemm", mutates_args=())
def gemm_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float, alpha: float,
            family: int, config: list[int]) -> torch.Tensor:
    m, k = a.shape
    enable_streamk, backend = _RESTRICTION[family]
    return _gemm_new(a, b, m, b.shape[1], k, bias, beta, alpha, enable_streamk, _config_from_list(config),
                     backend)


def _gemm_new(a, b, m, n, k, bias, beta, alpha, enable_streamk, config: GemmConfig | None,
              backend: str | None = None) -> torch.Tensor:
    # new_empty with int sizes: 0.85 us, torch.empty((m, n), dtype=, device=) 1.8 us (keyword parsing).
    out = a.new_empty(m, n)
    _run(a, b, m, n, k, bias, beta, alpha, enable_streamk, config, out, backend)
    return out


@gemm_op.register_fake
def _(a, b, bias, beta, alpha, family, config):
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup_context(ctx, inputs, output):
    a, b, bias, beta, alpha, family, config = inputs
    ctx.save_for_backward(a, b)
    ctx.bias_shape = None if bias is None else bias.shape
    ctx.beta, ctx.alpha, ctx.family = beta, alpha, family


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = grad_b = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_a = gemm_op(grad, b.t(), None, 0.0, ctx.alpha, ctx.family, [])
    if ctx.needs_input_grad[1]:
        grad_b = gemm_op(a.t(), grad, None, 0.0, ctx.alpha, ctx.family, [])
    if ctx.bias_shape is not None and ctx.needs_input_grad[2]:
        grad_bias = (grad.float().sum_to_size(ctx.bias_shape) * ctx.beta).to(grad.dtype)
    return grad_a, grad_b, grad_bias, None, None, None, None


gemm_op.register_autograd(_backward, setup_context=_setup_context)


def _gemm(a, b, bias, beta, alpha, out, enable_streamk, config, op: str, backend: str | None = None
          ) -> torch.Tensor:
    # The config travels as list[int] only through the custom op (its schema); eager calls keep the object.
    # The sizes are read once here and handed down (0.2-0.3 us a read of .shape pair).
    m, k = a.shape
    n = b.shape[1]
    if out is not None:
        compiling = torch.compiler.is_compiling()
        check_out(out, m, n, a, b, bias, op, compiling)
        if compiling:
            return out.copy_(gemm_op(a, b, bias, beta, alpha, _FAMILY[enable_streamk, backend],
                                     _config_to_list(config)))
        _run(a, b, m, n, k, bias, beta, alpha, enable_streamk, config, out, backend)
        return out
    # Autograd or torch.compile need the custom op. Spelled out rather than any() over a generator:
    # 0.6 -> 0.25 us.
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and (
            a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad))):
        return gemm_op(a, b, bias, beta, alpha, _FAMILY[enable_streamk, backend], _config_to_list(config))
    return _gemm_new(a, b, m, n, k, bias, beta, alpha, enable_streamk, config, backend)


# Fast path of a repeated call. Every check above is a function of each tensor argument's (type, layout,
# shape, strides, dtype, device) and of the options, except four per-call facts: grad mode with the
# requires_grad flags, out's memory overlap with the inputs (data pointers), and TRITON_INTERPRET for CPU
# tensors. A call that passed every check is remembered under those facts with what _run derived from
# them (sizes, device info, the selected config); a later call with the same facts re-checks only the
# per-call ones and launches. Anything else (a miss, a grad-needing call, a possible overlap, an option
# the key cannot hold, torch.compile) takes the checked path above, which raises as before. Per call on
# the 2-core CPU box, launch_gemm's final _launch stubbed (TRITON_INTERPRET, 64^3 fp16, median of 9 x
# 20000; launch_gemm alone 2.05 us): matmul(out=) 6.8-7.2 -> 5.1-5.3 us, matmul 6.8-6.9 -> 5.4-5.8,
# addmm 9.5-9.8 -> 7.5-7.6, linear (3-D x, bias) 16.8-17.3 -> 11.1-11.3; fp32 another 0.6 (tf32 flag).
# The key costs ~1.2 us for three tensors (six attribute reads each, ~50 ns a read, then a tuple hash).


@dataclass(frozen=True, slots=True)
class _Hit:
    m: int
    n: int
    k: int
    info: DeviceInfo
    config: GemmConfig
    problem_key: tuple
    fp32: bool  # precision then depends on the global tf32 flag, read per call
    spans: tuple[int, int, int, int]  # span_bytes of out, a, b, bias (out= calls only)
    restriction: tuple  # (enable_streamk, backend): part of the key, kept for a fall-back's selection
    out_shape: tuple | None = None  # linear of an N-D x: the result's shape


_hits: dict[tuple, _Hit] = {}
_HITS_CAP = 4096
dispatch.on_clear.append(_hits.clear)  # a cached config must not outlive the selection it came from
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


def _key(op: str, enable_streamk: object, backend: object, config: object, a: object, b: object,
         c: object = None, d: object = None) -> tuple | None:
    """The cache key of a call on tensors a, b and optional c, d; None where the fast path does not
    apply (then nothing is remembered either). Spelled out flat rather than a helper per tensor over
    map(): 1.6 -> 1.2 us for three tensors."""
    if config is not None or not (enable_streamk is None or type(enable_streamk) is bool) or \
            not (backend is None or backend == "triton" or backend == "torch") or _is_compiling():
        return None
    try:
        if _grad_enabled() and (a.requires_grad or b.requires_grad or (c is not None and c.requires_grad)
                                or (d is not None and d.requires_grad)):
            return None  # autograd's custom op, or out='s refusal: the checked path, as before
        # Layout is needed: a sparse COO tensor has a shape and strides (all 0) like an expanded view.
        return (op, enable_streamk, backend, type(a), a.layout, a.shape, a.stride(), a.dtype, a.device,
                type(b), b.layout, b.shape, b.stride(), b.dtype, b.device,
                None if c is None else (type(c), c.layout, c.shape, c.stride(), c.dtype, c.device),
                None if d is None else (type(d), d.layout, d.shape, d.stride(), d.dtype, d.device))
    except Exception:  # not a tensor, or one without sizes/strides: the checks name it
        return None


def _usable(hit: _Hit, out: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor,
            bias: torch.Tensor | None) -> bool:
    """Whether the per-call facts a key leaves out allow the hit: the interpreter still chosen for CPU
    tensors, and no byte of out in the range of an input (else check_out compares their storages)."""
    if hit.info is INTERPRETER_DEVICE and not interpreter_enabled():
        return False
    if out is None:
        return True
    out_span, a_span, b_span, bias_span = hit.spans
    lo = out.data_ptr()
    hi = lo + out_span
    p = a.data_ptr()
    if p < hi and lo < p + a_span:
        return False
    p = b.data_ptr()
    if p < hi and lo < p + b_span:
        return False
    return bias is None or not ((p := bias.data_ptr()) < hi and lo < p + bias_span)


def _launch_hit(hit: _Hit, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
                bias: torch.Tensor | None, alpha: float, beta: float) -> torch.Tensor:
    """What _run does for a checked call, with what it derived taken from the hit."""
    if out is None:
        out = a.new_empty(hit.m, hit.n)
    # The key's bias kind is "none" for addmm with beta == 0 too: the input is ignored.
    bias2d = None if hit.problem_key[5] == "none" else torch.broadcast_to(bias, (hit.m, hit.n))
    precision = "tf32" if not hit.fp32 or _allow_tf32() else "ieee"
    _launch_selected(a, b, out, bias2d, alpha, beta, hit.config, hit.problem_key, hit.info, hit.restriction,
                     precision)
    return out


def _remember(key: tuple | None, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
              bias: torch.Tensor | None, beta: float, enable_streamk: bool | None, backend: str | None,
              out_shape: tuple | None = None) -> None:
    """Record a call that passed every check (and ran) under its key; a and b are the GEMM operands."""
    if key is None:
        return
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:  # an empty output launches nothing: the checked path is enough
        return
    info = tensor_device_info(a)
    problem_key = _problem_key(a, b, m, n, k, None if beta == 0.0 else bias)
    config = dispatch.select_config(problem_key, info, enable_streamk, backend)
    spans = (0, 0, 0, 0) if out is None else \
        (span_bytes(out), span_bytes(a), span_bytes(b), 0 if bias is None else span_bytes(bias))
    if len(_hits) >= _HITS_CAP:
        _hits.clear()
    _hits[key] = _Hit(m, n, k, info, config, problem_key, a.dtype is torch.float32, spans,
                     (enable_streamk, backend), out_shape)


def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
           enable_streamk: bool | None = None, config: GemmConfig | None = None,
           backend: str | None = None) -> torch.Tensor:
    """a @ b for 2-D a (M, K) and b (K, N), as torch.mm.

    backend: None (dispatch decides between the kernels and torch.mm), "triton" (the kernels only) or
    "torch" (torch.mm, the vendor GEMM)."""
    key = _key("matmul", enable_streamk, backend, config, a, b, out)
    hit = _hits.get(key) if key is not None else None
    if hit is not None and _usable(hit, out, a, b, None):
        return _launch_hit(hit, a, b, out, None, 1.0, 1.0)
    check_operands(a, b)
    if enable_streamk is not None or config is not None or backend is not None:
        check_options(enable_streamk, config, backend)
    result = _gemm(a, b, None, 1.0, 1.0, out, enable_streamk, config, "matmul", backend)
    if hit is None:
        _remember(key, a, b, out, None, 1.0, enable_streamk, backend)
    return result


def addmm(input: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1,
          out: torch.Tensor | None = None, enable_streamk: bool | None = None,
          config: GemmConfig | None = None, backend: str | None = None) -> torch.Tensor:
    """beta * input + alpha * (a @ b), with input broadcast as torch.addmm broadcasts it; backend as
    for matmul (torch.addmm is the vendor's)."""
    key = None
    if type(beta) in (float, int) and type(alpha) in (float, int):  # bool and other Reals: the checks
        key = _key("addmm" if beta != 0 else "addmm0", enable_streamk, backend, config, input, a, b, out)
    hit = _hits.get(key) if key is not None else None
    if hit is not None and _usable(hit, out, a, b, input):
        return _launch_hit(hit, a, b, out, input, float(alpha), float(beta))
    check_operands(a, b)
    check_bias("input", input, a, a.shape[0], b.shape[1])
    beta_f, alpha_f = check_scalar("beta", beta), check_scalar("alpha", alpha)
    check_options(enable_streamk, config, backend)
    result = _gemm(a, b, input, beta_f, alpha_f, out, enable_streamk, config, "addmm", backend)
    if hit is None:
        _remember(key, a, b, out, input, beta_f, enable_streamk, backend)
    return result


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           enable_streamk: bool | None = None, config: GemmConfig | None = None,
           backend: str | None = None) -> torch.Tensor:
    """As torch.nn.functional.linear: x[..., K] @ weight[N, K].T + bias[N]; backend as for matmul."""
    key = _key("linear", enable_streamk, backend, config, x, weight, bias)
    hit = _hits.get(key) if key is not None else None
    if hit is not None and _usable(hit, None, x, weight, bias):
        x2 = x if hit.out_shape is None else x.reshape(hit.m, hit.k)
        y = _launch_hit(hit, x2, weight.t(), None, bias, 1.0, 1.0)
        return y if hit.out_shape is None else y.reshape(hit.out_shape)
    check_tensor("x", x)
    check_tensor("weight", weight, 2)
    if x.dim() < 1:
        raise ValueError("x must have at least 1 dimension")
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features in its last dimension but weight "
                         f"{tuple(weight.shape)} expects {weight.shape[1]}")
    # Explicit row count: reshape(-1, 0) of an empty x is ambiguous and raises. A 2-D x is used as it
    # is, and so is its result: a reshape to the same shape is a view op (0.9 us each).
    flat = x.dim() == 2
    x2 = x if flat else x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    check_operands(x2, weight.t(), "x", "weight")
    n = weight.shape[0]
    if bias is not None:
        check_tensor("bias", bias, 1)
        if bias.shape[0] != n:
            raise ValueError(f"bias has shape {tuple(bias.shape)}, expected ({n},)")
        check_bias("bias", bias, x2, x2.shape[0], n)
    check_options(enable_streamk, config, backend)
    y = _gemm(x2, weight.t(), bias, 1.0, 1.0, None, enable_streamk, config, "linear", backend)
    out_shape = None if flat else (*x.shape[:-1], n)
    if hit is None:
        _remember(key, x2, weight.t(), None, bias, 1.0, enable_streamk, backend, out_shape)
    return y if flat else y.reshape(out_shape)
