"""`tritonblas explain M N K`: what dispatch selects for one problem, why, and the heuristic's ranking."""

from __future__ import annotations

import typer
from rich import box
from rich.table import Table

from ..arch import DeviceInfo
from ..arith import tflops
from ..problem import vendor_name
from . import common
from .common import (
    DB_HELP,
    BackendChoice,
    BDtypeOption,
    BiasChoice,
    BiasOption,
    DtypeOption,
    LayoutChoice,
    LayoutOption,
    OutDtypeOption,
    ScalesChoice,
    ScalesOption,
    SizeK,
    SizeM,
    SizeN,
    console,
    fail,
    parse_size,
    problem_of_args,
)
from .tables import Col, fitted
from .targets import check_arch, check_db


def _local_device() -> DeviceInfo | None:
    """The GPU here (current device), or the interpreter's device; None without either."""
    import torch

    from ..device import device_info

    if common.interpreter_mode():
        return device_info(torch.device("cpu"))
    if common.gpu_count() == 0:
        return None
    return device_info(torch.device("cuda"))


def _explain_device(arch: str | None, sms: int | None) -> DeviceInfo:
    """--arch explains for a GPU that is not here (the GPU here when it is of that arch, for its SM
    count); otherwise the GPU (or the interpreter) we run on."""
    from ..arch import device_for_arch

    if arch is None:
        if sms is not None:
            fail("error: --sms goes with --arch (the GPU here reports its own SM count)")
        here = _local_device()
        if here is None:
            fail("error: no CUDA or ROCm GPU here to explain for; pass the target with --arch, e.g. "
                 "--arch sm_90 (or set TRITON_INTERPRET=1 for the interpreter)")
        return here
    check_arch(arch)
    here = None if common.interpreter_mode() or common.gpu_count() == 0 else _local_device()
    if here is not None and here.arch == arch and sms is None:
        return here
    return device_for_arch(arch, sm_count=sms)


def _where(info: DeviceInfo, sms_given: bool) -> str:
    from ..arch import ARCHS

    on = info.name if info.name == info.arch else f"{info.name} ({info.arch})"
    text = f"on {on}, {info.sm_count} SMs"
    if info.name == info.arch and info.arch in ARCHS and not sms_given and info.arch != "interpreter":
        text += f" ({ARCHS[info.arch].part}'s; --sms for another part)"
    return text


def explain(m: str = SizeM, n: str = SizeN, k: str = SizeK, dtype: str = DtypeOption,
            layout: LayoutChoice = LayoutOption, bias: BiasChoice = BiasOption,
            scales: ScalesChoice = ScalesOption, out_dtype: str = OutDtypeOption, b_dtype: str = BDtypeOption,
            streamk: bool = typer.Option(None, "--streamk/--no-streamk",
                                         help="Only Stream-K / only Persistent (default: either)."),
            backend: BackendChoice = typer.Option(None, "--backend", help="Only the kernels (triton) or "
                                                  "the vendor pinned (torch: torch.mm, or torch._scaled_mm "
                                                  "for a quantized problem); default: dispatch decides."),
            arch: str = typer.Option(None, "--arch", help="Explain for this arch (e.g. sm_90, sm_80, "
                                     "sm_100) instead of the GPU here; no GPU needed."),
            sms: int = typer.Option(None, "--sms", min=1, help="SM count with --arch (default: the arch's "
                                    "reference part, e.g. 132 for sm_90, 108 for sm_80)."),
            db: str = typer.Option(None, "--db", help=DB_HELP),
            top: int = typer.Option(10, "--top", min=1, help="How many ranked candidates to show."),
            groups: int = typer.Option(None, "--groups", min=1, help="A grouped GEMM (tritonblas.grouped_mm, "
                                       "a MoE layer): GROUPS experts, M rows in all, each expert's weight "
                                       "N x K (--layout nt: stored (E, N, K)).")) -> None:
    """Show the config dispatch selects for one problem, its source, and the heuristic's ranking.

    Dispatch looks in order at: the tuning database, the shipped `configs/<arch>.json`, the nearest
    tuned neighbour, the analytical heuristic. Each may answer with a kernel config (backend triton) or
    with torch.mm (backend torch: the vendor GEMM, a tuning candidate like any other). The ranking shows
    the heuristic's cost model term by term.

    A quantized problem (tritonblas.scaled_mm, as torch._scaled_mm) is --dtype e4m3, e5m2 or int8 with
    --scales, its output --out-dtype, B's dtype --b-dtype where it differs (e4m3 with e5m2); its vendor
    GEMM is torch._scaled_mm (torch._int_mm for int8), where torch takes the problem. --scales block
    (fp8): scale_a per 1x128 block of A's rows, scale_b per 128x128 block of B, on the persistent kernel
    (no Stream-K), with torch.nn.functional.scaled_mm's block-wise scaling as the vendor.

    **Examples**

    ```
    tritonblas explain 4096 4096 4096 --dtype bf16
    tritonblas explain 16 6144 4096 --dtype fp16 --layout nt --bias row --arch sm_90 --top 5
    tritonblas explain 8192 8192 8192 --arch sm_80 --sms 84    # an A40 (sm_86 parts differ too)
    tritonblas explain 4096 4096 4096 --dtype e4m3 --scales row --out-dtype bf16 --layout nt --arch sm_90
    tritonblas explain 64 8192 8192 --dtype e4m3 --b-dtype e5m2 --scales tensor --out-dtype bf16 --layout nt
    tritonblas explain 16 6144 4096 --dtype int8 --scales row_a --bias row --layout nt --arch sm_90
    tritonblas explain 64 7168 2048 --dtype e4m3 --scales block --out-dtype bf16 --layout nt --arch sm_90
    tritonblas explain 32768 1536 2048 --groups 128 --layout nt --arch sm_90   # Qwen3-MoE's experts
    ```
    """
    from ..selection import dispatch, heuristic

    if groups is not None:
        check_db(db)
        with dispatch.using_database(db):  # its folder holds the user's grouped table
            _explain_grouped(parse_size(m, "M"), parse_size(n, "N"), parse_size(k, "K"), groups, dtype,
                             layout, bias, scales, _explain_device(arch, sms), sms is not None)
        return

    p = problem_of_args(parse_size(m, "M"), parse_size(n, "N"), parse_size(k, "K"), dtype, layout, bias,
                        scales, out_dtype, b_dtype)
    info = _explain_device(arch, sms)
    where = check_db(db)
    with dispatch.using_database(db):
        try:
            sel = dispatch.select_problem(p, enable_streamk=streamk, device=info,
                                          backend=None if backend is None else backend.value)
        except (ValueError, RuntimeError) as e:
            fail(f"error: {e}", code=1)
        eager = _eager_lines(sel)  # (a torch pick's kernel comes from the same database)
    ranked = heuristic.rank(sel.problem, info, streamk)
    quantized = f", scales {p.scales}" if p.quantized else ""
    vendor = vendor_name(p) if p.quantized else "torch.mm / torch.addmm"
    lines = [("problem", f"{p.m}x{p.n}x{p.k} {p.dtypes_text()}, layout {p.layout}, bias {p.bias}{quantized}, "
                         f"{_where(info, sms is not None)}"),
             ("selected", sel.config.short()),
             ("backend", f"torch ({vendor}, the vendor GEMM)"
              if sel.backend == "torch" else "triton (the library's kernels)"),
             ("source", f"{sel.source}: {_source_detail(sel, where)}")]
    if sel.time_ms:
        kind = "measured" if sel.measured else "predicted by the heuristic"
        rate = tflops(p.m, p.n, p.k, sel.time_ms)
        against = f"; {vendor.split(' / ')[0]} {sel.torch_ms:.4g} ms in the same run" \
            if sel.torch_ms and sel.backend != "torch" else ""
        lines.append(("time", f"{sel.time_ms:.4g} ms {kind} ({rate:.1f} TFLOP/s){against}"))
    lines += eager
    for name, text in lines:
        console.print(f"{name + ':':10}{text}", markup=False)
    console.print(_ranking_table(ranked[:top], sel.config, len(ranked)))


def _explain_grouped(m: int, n: int, k: int, groups: int, dtype: str | None, layout, bias, scales,
                     info: DeviceInfo, sms_given: bool) -> None:
    """What grouped dispatch runs for a MoE layer's experts: the key (rows per group bucketed), the
    selection and its source (the user's table, the shipped configs/grouped/<arch>.json, a neighbour,
    the heuristic)."""
    from ..grouped.forms import GroupedShape
    from ..grouped.select import SHIPPED, key_of, select, table_for, vendor_preferred
    from ..grouped.usertable import dispatch_table
    from ..identity import triton_version
    from ..validate import TORCH_DTYPE_OF, TORCH_DTYPES

    names = TORCH_DTYPES.values()
    dtype = dtype or "bf16"
    if dtype not in names:
        fail(f"error: --dtype: a grouped GEMM is one of {', '.join(names)}, got {dtype}")
    kinds = (getattr(bias, "value", bias), getattr(scales, "value", scales))
    if any(kind not in (None, "none") for kind in kinds):
        fail("error: --groups: a grouped GEMM takes no --bias kind or --scales here (grouped_mm's bias is "
             "one row per group)")
    layout = getattr(layout, "value", layout)
    shape = GroupedShape(form="2d3d", groups=groups, m=m, n=n, k=k, out_shape=(m, n))
    key = key_of(shape, TORCH_DTYPE_OF[dtype], layout[0] == "t", layout[1] == "t")
    sel = select(key, info)
    shipped = f"configs/grouped/{table_for(SHIPPED, info.arch, triton_version()).name}"
    why = {"shipped": shipped, "neighbor": f"the nearest tuned rows per group in {shipped}",
           "heuristic": "nothing tuned for it",
           "user": f"tritonblas tune's table {dispatch_table(info.arch)[1]}"}.get(sel.source, sel.source)
    if sel.source == "heuristic" and sel.backend == "torch":
        why += "; torch's op measured faster for such keys (grouped.select.vendor_preferred)"
    elif sel.source == "heuristic" and vendor_preferred(key, info) is False:
        why += "; our kernels measured faster for such keys"
    lines = [("problem", f"grouped {key.text()}, {m} rows, {_where(info, sms_given)}"),
             ("selected", sel.config.short()),
             ("backend", _grouped_backend(sel.config)),
             ("source", f"{sel.source}: {why}"),
             ("routed", "transparent mode's calls (torch._grouped_mm) run torch's kernel from C++ after the "
                        "first, no Python" if sel.config.is_vendor else
                        "transparent mode's calls (torch._grouped_mm) run the kernel, launched from Python")]
    for name, text in lines:
        console.print(f"{name + ':':10}{text}", markup=False)


def _grouped_backend(config) -> str:
    """What runs a grouped selection: torch's op, the Triton grouped kernel, or the Gluon one (its Triton
    twin where a call's tensors are not TMA-ready)."""
    if config.is_vendor:
        return "torch (torch._grouped_mm, the vendor)"
    if config.gluon:
        return ("triton (the Gluon grouped kernel, kernels/grouped_gluon.py; a call whose tensors TMA cannot "
                "read runs the grouped kernel's same tile)")
    return "triton (the grouped kernel)"


def _eager_lines(sel) -> list[tuple[str, str]]:
    """What eager calls of a kernel selection run, explicit and routed (transparent mode): the kernel,
    or torch's op where the kernel's gain is below the host time its call costs above torch's
    (call.path.eager_torch_reason; the kernel runs under CUDA graph capture either way). A quantized
    problem's calls, explicit or routed, share scaled_mm's plan, its rules (ScaledPlan.eager_vendor,
    routed_eager_vendor) judged where torch takes the problem at all. Routed calls as transparent mode's
    C++ kernels run them (enable()'s default): a kernel whose launch gets a record is launched from C++
    (launch/native.py; a routed _scaled_mm's where its scales are contiguous)."""
    from ..arch import INTERPRETER_DEVICE
    from ..call.path import eager_torch_reason
    from ..config import vendor_scaled_refusal
    from ..launch.native import config_has_record
    from ..launch.prepared import config_launches_directly

    if sel.device is INTERPRETER_DEVICE:
        return []
    if sel.backend == "torch":
        return [] if sel.problem.quantized else _eager_kernel_lines(sel)
    if sel.problem.scales == "block":  # (call.scaled plans no eager rule for them: nothing was timed)
        return [("eager", "explicit and transparent mode's calls run the kernel (block-wise scales: the "
                          "persistent kernel only, no Stream-K; torch's block-wise op with backend='torch')")]
    direct = config_launches_directly(sel.config)
    fast: list[tuple[str, str]] = []
    if sel.problem.quantized:
        refusal = vendor_scaled_refusal(sel.problem)
        if refusal is not None:
            return [("eager", f"calls run the kernel (torch refuses the problem: {refusal})")]
        sides = (("eager", False, "explicit calls", "torch._scaled_mm"),
                 ("routed", True, "transparent mode's calls", "torch._scaled_mm"))
        if sel.config.gluon:  # (call.scaled._prepare)
            fast = [("fast", "use_fast_accum=True calls run torch._scaled_mm's fast mode (the Gluon kernel "
                             "always promotes to fp32)")]
    else:
        sides = (("eager", False, "explicit calls", "torch.mm"),
                 ("routed", True, "transparent mode's calls", "torch.mm"))
    recorded = config_has_record(sel.config) and sel.problem.dtype != "fp32"
    lines = []
    for name, routed, who, vendor in sides:
        why = eager_torch_reason(sel, direct, routed, routed and recorded)
        if why is None and routed and recorded:
            who += " (launched from C++)"
        text = f"{who} run the kernel" if why is None else \
            f"{who} run {vendor} ({why}); the kernel runs under CUDA graph capture"
        lines.append((name, text))
    return lines + fast


def _eager_kernel_lines(sel) -> list[tuple[str, str]]:
    """A torch pick whose tuning run's fastest kernel runs eager explicit calls (call.path.eager_kernel)."""
    from ..call.path import eager_kernel, eager_kernel_reason

    kernel = eager_kernel(sel)
    if kernel is None:
        return []
    why = eager_kernel_reason(sel, kernel, True)
    return [("eager", f"explicit calls run triton {kernel.config.short()} ({why}); torch.mm under CUDA graph "
                      "capture and in transparent mode")]


def _source_detail(sel, where: str) -> str:
    from ..selection.dispatch import shipped_name

    if sel.source == "heuristic":
        shipped = shipped_name(sel.device.arch, sel.problem.scales)
        text = f"nothing tuned for it in {where}, configs/{shipped} or nearby shapes"
        return text + (f"; {sel.detail}" if sel.backend == "torch" else "")
    return sel.detail


def _ranking_table(ranked, selected, total: int) -> Table:
    """The cost model term by term (times in us; compute includes the Stream-K fix-up)."""
    cols = [Col("#", right=True), Col("config"), Col("us", right=True), Col("compute", right=True, drop=1),
            Col("memory", right=True, drop=2), Col("waves", right=True, drop=3), Col("eff", right=True),
            Col("waste", right=True)]
    return fitted(console, cols, ([f"{'*' if e.config == selected else ''}{i}", e.config.short(),
                                   f"{e.total_us:.1f}", f"{e.compute_us:.1f}", f"{e.memory_us:.1f}",
                                   f"{e.waves:.2f}", f"{e.efficiency:.2f}", f"{e.edge_waste:.0%}"]
                                  for i, e in enumerate(ranked, 1)),
                  title=f"heuristic ranking: top {len(ranked)} of {total} feasible configs (* = selected)",
                  box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1), pad_edge=False)
