"""The core op `tritonblas::gemm`: the one node autograd and torch.compile see for a GEMM of the library.

Its body is call.run.gemm_body (lookup-or-prepare, then launch, as every eager call); its backward runs the
library's kernels too; its fake implementation gives torch.compile the output's shape. ops imports this
module on the first call that needs it (autograd, torch.compile): an eager call never goes through the
custom op, and registering it is not free (0.14-0.24 s in a fresh process on the H200).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..config import BACKENDS, GemmConfig
from ..launch.scratch import unpooled
from .run import gemm_body

# (enable_streamk, backend) <-> the custom op's `family` int (its schema has no Optional[bool]). A
# family restriction already means the kernels, so (False, "triton") is (False, None).
FAMILY = {(None, None): -1, (False, None): 0, (True, None): 1, (None, "triton"): 2, (None, "torch"): 3,
          (False, "triton"): 0, (True, "triton"): 1}
RESTRICTION = {-1: (None, None), 0: (False, None), 1: (True, None), 2: (None, "triton"), 3: (None, "torch")}


# The custom op's schema takes the config as list[int]: every GemmConfig field in declaration order
# (bools as 0/1, grid None as 0, backend as its index in BACKENDS), so a field added to GemmConfig
# cannot be dropped on the way.
_CONFIG_FIELDS = tuple(GemmConfig.model_fields)
_BOOL_FIELDS = frozenset(f for f, info in GemmConfig.model_fields.items() if info.annotation is bool)


def config_to_list(config: GemmConfig | None) -> list[int]:
    if config is None:
        return []
    return [BACKENDS.index(config.backend) if f == "backend" else int(getattr(config, f) or 0)
            for f in _CONFIG_FIELDS]


def config_from_list(values: list[int]) -> GemmConfig | None:
    return _config_from_tuple(tuple(values)) if values else None


@functools.lru_cache(maxsize=1024)
def _config_from_tuple(values: tuple[int, ...]) -> GemmConfig:
    """Cached: validating a GemmConfig costs ~5 us, paid once per distinct config."""
    fields = dict(zip(_CONFIG_FIELDS, values, strict=True))
    fields = {f: bool(v) if f in _BOOL_FIELDS else v for f, v in fields.items()}
    fields["grid"] = fields["grid"] or None
    fields["backend"] = BACKENDS[fields["backend"]]
    return GemmConfig(**fields)


@torch.library.custom_op("tritonblas::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float, alpha: float,
         family: int, config: list[int]) -> torch.Tensor:
    """alpha * a @ b + beta * bias for checked 2-D operands: the node autograd and torch.compile see.
    Its scratch is never pooled: compiled code may run it into a CUDA graph's pool (launch.scratch)."""
    with unpooled():
        return gemm_body(a, b, bias, beta, alpha, *RESTRICTION[family], config_from_list(config))


@gemm.register_fake
def _(a, b, bias, beta, alpha, family, config):
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup_context(ctx, inputs, output):
    a, b, bias, beta, alpha, family, config = inputs
    ctx.save_for_backward(a, b)
    ctx.bias_shape = None if bias is None else bias.shape
    ctx.beta, ctx.alpha, ctx.family = beta, alpha, family


def _backward(ctx, grad, product=None):
    """The gradients of a, b and bias; `product` runs each GEMM (the custom op where None: what autograd
    of the gradients, torch.compile and torch.func need). Where `ctx.weight` is set (ops' linear), b
    was saved as the linear's weight, the GEMM's B transposed, and its gradient is the weight's."""
    a, b = ctx.saved_tensors
    product = product or _custom_op_product
    weight = getattr(ctx, "weight", False)
    grad_a = grad_b = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_a = _product_grad(grad, b if weight else b.t(), a, ctx.alpha, ctx.family, product)
    if ctx.needs_input_grad[1]:
        grad_b = _product_grad(grad.t(), a, b, ctx.alpha, ctx.family, product) if weight else \
            _product_grad(a.t(), grad, b, ctx.alpha, ctx.family, product)
    if ctx.bias_shape is not None and ctx.needs_input_grad[2]:
        grad_bias = _bias_grad(grad, ctx.bias_shape, ctx.beta)
    return grad_a, grad_b, grad_bias, None, None, None, None


def _custom_op_product(left: torch.Tensor, right: torch.Tensor, alpha: float, family: int) -> torch.Tensor:
    return gemm(left, right, None, 0.0, alpha, family, [])


def eager_product(left: torch.Tensor, right: torch.Tensor, alpha: float, family: int) -> torch.Tensor:
    """alpha * left @ right as the custom op's body computes it, without the custom op's dispatch (about
    50 us of Python a call on the CPU box): for a backward whose gradients need no graph of their own."""
    return gemm_body(left, right, None, 0.0, alpha, *RESTRICTION[family])


def _product_grad(left: torch.Tensor, right: torch.Tensor, like: torch.Tensor, alpha: float,
                  family: int, product: Callable[..., torch.Tensor]) -> torch.Tensor:
    """alpha * left @ right, the gradient of `like`, in the layout torch's mm backward gives it
    (mm_mat1_backward / mm_mat2_backward): column-major where `like` is densely column-major (strides
    (1, rows)), computed as the row-major product (right^T @ left^T)^T, never copied; row-major else.
    AccumulateGrad copies a gradient whose strides differ from its parameter's: a transposing copy per
    weight and .backward() (nn.Linear's weight reaches the op as weight.t(), column-major)."""
    s0, s1 = like.stride()
    if s0 == 1 and s1 == like.shape[0]:
        return product(right.t(), left.t(), alpha, family).t()
    return product(left, right, alpha, family)


def _bias_grad(grad: torch.Tensor, shape: torch.Size, beta: float) -> torch.Tensor:
    """beta * grad summed to the bias's shape, as torch's addmm backward and broadcast reduction give it
    (same rounding: the product in grad's dtype, then the sum; grad itself when beta is 1 and nothing
    is broadcast, so a full bias's gradient keeps grad's layout as torch's does)."""
    scaled = grad if beta == 1.0 else grad * beta
    return scaled if scaled.shape == shape else scaled.sum_to_size(shape)


gemm.register_autograd(_backward, setup_context=_setup_context)

# ops' eager autograd.Function (ops._Gemm) uses these two: one definition of the saved context and of the
# gradients for both ways a call gets autograd.
setup_context, backward = _setup_context, _backward
