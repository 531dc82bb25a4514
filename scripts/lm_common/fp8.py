"""float8 inference for scripts/model_bench.py --fp8: a model's nn.Linear layers swapped in place for
Fp8Linear, weights quantized once to float8_e4m3fn, activations per call (dynamic scaling), torchao's and
transformers' conventions.

    row    torchao's Float8DynamicActivationFloat8Weight with PerRow granularity: one float32 scale per
           output channel of the weight, (1, N) as torch._scaled_mm's scale_b of b = W.t(), and one per
           token of the activation, (M, 1); torch._scaled_mm(x, W.t(), ...), which transparent mode routes
    block  transformers' FineGrainedFP8 (DeepSeek-V3's recipe): one scale per 128x128 block of the weight,
           (N/128, K/128) as its weight_scale_inv, and one per 1x128 block of each token, (M, K/128) stored
           outer-dim-major (stride 1 along M, as torch's block-wise kernel takes it); torch's side runs
           torch.nn.functional.scaled_mm (BlockWise1x128 x BlockWise128x128), which transparent mode does
           not route, so our side is tritonblas.scaled_mm itself, switched on by block_by_tritonblas()

A scale is amax / 448 (float8_e4m3fn's largest value), at least 1e-12; blocks are ceil(size / 128), the
last one partial. Left in the model's dtype, as transformers' fp8 quantizers leave them: the output head
(lm_head / BERT's decoder: transformers' modules_to_not_convert, and tied to the embedding in some models),
embeddings (not nn.Linear), a mixture of experts' router and experts (not nn.Linear: transformers 5 keeps
them as parameters, its experts run by torch._grouped_mm in bf16), and GPT-2's Conv1D layers (so GPT-2 has
none to quantize)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

MODES = ("row", "block")
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
EPS = 1e-12  # the smallest scale: an all-zero row or block quantizes to zeros, not NaN
BLOCK = 128

_block_ours = [False]  # block mode's GEMM: torch's (False) or tritonblas.scaled_mm (True)


def torch_has_block() -> bool:
    """Whether this torch has the block-wise scaled GEMM torch's side of --fp8 block runs."""
    scaling = getattr(F, "ScalingType", None)
    recipes = ("BlockWise1x128", "BlockWise128x128")
    return hasattr(F, "scaled_mm") and all(hasattr(scaling, r) for r in recipes)


@contextlib.contextmanager
def block_by_tritonblas() -> Iterator[None]:
    """Block mode's GEMMs run by tritonblas.scaled_mm inside (our side), by torch's own outside. The
    flag is read at each call, so a CUDA graph captured inside keeps our kernels."""
    before = _block_ours[0]
    _block_ours[0] = True
    try:
        yield
    finally:
        _block_ours[0] = before


def block_ours() -> bool:
    """Whether block mode's GEMMs run by tritonblas.scaled_mm now (inside block_by_tritonblas())."""
    return _block_ours[0]


def _scale(amax: torch.Tensor) -> torch.Tensor:
    return (amax.float() / FP8_MAX).clamp(min=EPS)


def _cast(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / scale in float8_e4m3fn, saturated (the scale maps amax to 448; rounding must not reach inf)."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale): one scale per row of x (M, K), float32 (M, 1)."""
    scale = _scale(x.abs().amax(dim=-1, keepdim=True))
    return _cast(x, scale), scale


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


def _padded(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    return F.pad(x, (0, cols - x.shape[1], 0, rows - x.shape[0]))


def quantize_token_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale): one scale per 1x128 block of each row of x (M, K); scale float32 (M, ceil(K/128)),
    outer-dim-major (allocated (ceil(K/128), M), transposed)."""
    m, k = x.shape
    kb = _blocks(k)
    amax = _padded(x, m, kb * BLOCK).abs().view(m, kb, BLOCK).amax(-1)  # (M, Kb)
    scale = _scale(amax.t()).contiguous().t()
    return _cast(x, scale.repeat_interleave(BLOCK, dim=1)[:, :k]), scale


def quantize_weight_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(w_fp8, scale): one scale per 128x128 block of w (N, K); scale float32 (ceil(N/128), ceil(K/128)),
    transformers' weight_scale_inv."""
    n, k = w.shape
    nb, kb = _blocks(n), _blocks(k)
    amax = _padded(w, nb * BLOCK, kb * BLOCK).abs().view(nb, BLOCK, kb, BLOCK).amax(dim=(1, 3))
    scale = _scale(amax)
    full = scale.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:n, :k]
    return _cast(w, full), scale


class Fp8Linear(torch.nn.Module):
    """nn.Linear's forward on a float8 weight: x quantized per call, one scaled GEMM, the output in
    bf16 (the bias, kept in bf16, added by the GEMM for row, after it for block)."""

    def __init__(self, linear: torch.nn.Linear, mode: str) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode, self.in_features, self.out_features = mode, linear.in_features, linear.out_features
        w = linear.weight.detach()
        weight, scale = quantize_rows(w) if mode == "row" else quantize_weight_blocks(w)
        self.register_buffer("weight", weight)  # (N, K), so weight.t() is column-major, as _scaled_mm takes
        # row: (1, N), _scaled_mm's scale_b; block: (N/128, K/128), whose .t() is scale_b
        self.register_buffer("weight_scale", scale.t().contiguous() if mode == "row" else scale)
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = self._row(flat) if self.mode == "row" else self._block(flat)
        return y.view(*x.shape[:-1], self.out_features)

    def _row(self, x: torch.Tensor) -> torch.Tensor:
        xq, sx = quantize_rows(x)
        return torch._scaled_mm(xq, self.weight.t(), sx, self.weight_scale, bias=self.bias,
                                out_dtype=torch.bfloat16)

    def _block(self, x: torch.Tensor) -> torch.Tensor:
        xq, sx = quantize_token_blocks(x)
        sw = self.weight_scale.t()
        if _block_ours[0]:
            import tritonblas

            return tritonblas.scaled_mm(xq, self.weight.t(), sx, sw, bias=self.bias, out_dtype=torch.bfloat16)
        y = F.scaled_mm(xq, self.weight.t(), sx, F.ScalingType.BlockWise1x128, sw,
                        F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, mode={self.mode}, " \
            f"bias={self.bias is not None}"


def quantize_model(model: torch.nn.Module, mode: str) -> list[str]:
    """Swap each nn.Linear of `model` but its output head for an Fp8Linear in place; the names swapped."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    swapped = []
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and module is not head:
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, Fp8Linear(module, mode))
            swapped.append(name)
    return swapped
