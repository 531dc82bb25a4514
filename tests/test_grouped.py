"""tritonblas.grouped_mm: every form, dtype and layout, empty and ragged groups, bias, the TMA and
pointer paths, gradients, torch.compile, bad input (the interpreter on CPU; the GPU where present)."""

import pytest
import torch
from helpers.grouped import CASES, GLUON, POINTERS, TMA, Case, assert_close, loop, operands, pick_grouped

import tritonblas
from tritonblas.grouped import launch as grouped_launch


@pytest.mark.parametrize("path", ["pointers", "tma", "gluon"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forms(case: Case, path, device, monkeypatch):
    torch.manual_seed(0)
    pick_grouped(monkeypatch, {"pointers": POINTERS, "tma": TMA, "gluon": GLUON}[path])
    a, b, offs, bias = operands(case, device)
    launched = []
    real = grouped_launch.launch
    monkeypatch.setattr(grouped_launch, "launch", lambda spec: (launched.append(spec), real(spec))[1])
    out = tritonblas.grouped_mm(a, b, offs=offs, bias=bias)
    assert out.dtype == a.dtype
    assert_close(out, a, b, offs, bias)
    gluon = device == "cuda" and case.form == "2d3d" and case.layout == "nt" and case.dtype != "fp32"
    assert bool(launched) != (path == "gluon" and gluon)  # the Gluon kernel's launch is not launch()'s
    if path == "gluon" and launched:  # the Triton twin: the same tile
        assert launched[0].constexprs["BLOCK_M"] == 128 and launched[0].constexprs["BLOCK_N"] == 128
    elif path == "pointers":
        assert not launched[0].constexprs["USE_TMA"]
    elif case.form == "2d3d" and case.layout == "nt" and case.dtype == "fp32":  # a descriptor fits
        assert launched[0].constexprs["USE_TMA"]


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_out_dtype(out_dtype, device):
    case = CASES[1]
    a, b, offs, bias = operands(case, device)
    out = tritonblas.grouped_mm(a, b, offs=offs, bias=bias, out_dtype=out_dtype)
    assert out.dtype == out_dtype
    assert_close(out, a, b, offs, bias)


def test_matches_torch_grouped_mm(device):
    """Where torch's own op takes the call, the same values (the tail rows aside: torch leaves them)."""
    a, b, offs, _ = operands(Case("2d3d", 3, 40, 24, 32, (10, 0, 30), "nt", "bf16"), device)
    theirs = torch._grouped_mm(a, b, offs=offs)
    ours = tritonblas.grouped_mm(a, b, offs=offs)
    assert_close(ours, a, b, offs, None)
    assert (ours.float() - theirs.float()).abs().max() <= 0.05 * theirs.float().abs().max()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_backends(backend, device):
    case = CASES[0]
    a, b, offs, bias = operands(case, device)
    out = tritonblas.grouped_mm(a, b, offs=offs, bias=bias, backend=backend)
    if backend == "torch":  # rows past the last group end: what torch's op leaves there
        out[int(offs[-1]) :] = 0
    assert_close(out, a, b, offs, bias)


def test_tail_rows_are_zero(device):
    a, b, offs, bias = operands(Case("2d3d", 2, 30, 16, 16, (4, 6), "nn", bias=True), device)
    out = tritonblas.grouped_mm(a, b, offs=offs, bias=bias)
    assert (out[10:] == 0).all()


def test_no_groups(device):
    a = torch.randn(8, 16, device=device)
    b = torch.randn(0, 16, 12, device=device)
    out = tritonblas.grouped_mm(a, b, offs=torch.zeros(0, dtype=torch.int32, device=device))
    assert out.shape == (8, 12) and (out == 0).all()


GRAD_CASES = [c for c in CASES if c.dtype == "fp32"] + [
    Case("2d3d", 3, 20, 16, 24, (5, 0, 12), "nt", bias=True)
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.id)
def test_gradients(case: Case, device):
    """loss.backward() accumulating into .grad, as a training loop runs it: values against float64
    autograd of the reference, and each gradient in its input's layout."""
    torch.manual_seed(1)
    a, b, offs, bias = operands(case, device)
    leaves = [t.detach().requires_grad_() for t in (a, b)] + (
        [bias.detach().requires_grad_()] if bias is not None else []
    )
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    weight = torch.randn(
        loop(a, b, offs, bias, torch.float64, torch.float64).shape, device=device, dtype=torch.float64
    )
    for _ in range(2):  # accumulating
        out = tritonblas.grouped_mm(
            leaves[0], leaves[1], offs=offs, bias=leaves[2] if bias is not None else None
        )
        (out.double() * weight).sum().backward()
    ref = _reference_with_grad(ref_leaves, offs, bias is not None)
    (2 * ref * weight).sum().backward()
    for ours, theirs, leaf in zip(leaves, ref_leaves, (a, b, bias), strict=False):
        assert ours.grad.stride() == leaf.stride(), "a gradient keeps its input's layout"
        err = (ours.grad.double() - theirs.grad).norm() / theirs.grad.norm().clamp_min(1e-30)
        assert err < 1e-5, err


def _reference_with_grad(leaves, offs, has_bias):
    """The reference product, differentiable (float64 autograd through slices)."""
    a, b = leaves[0], leaves[1]
    bias = leaves[2] if has_bias else None
    form = f"{a.dim()}d{b.dim()}d"
    e = a.shape[0] if a.dim() == 3 else b.shape[0] if b.dim() == 3 else offs.shape[0]
    ends = offs.tolist() if offs is not None else [0] * e
    starts = [0, *ends[:-1]]
    parts = []
    for g in range(e):
        s, t = starts[g], ends[g]
        if form == "3d3d":
            parts.append(a[g] @ b[g] + (bias[g] if has_bias else 0))
        elif form == "2d3d":
            parts.append(a[s:t] @ b[g] + (bias[g] if has_bias else 0))
        elif form == "2d2d":
            parts.append(a[:, s:t] @ b[s:t] + (bias[g] if has_bias else 0))
        else:
            parts.append(a[g] @ b[:, s:t] + (bias[s:t] if has_bias else 0))
    if form in ("3d3d", "2d2d"):
        return torch.stack(parts)
    cat = torch.cat(parts, dim=0 if form == "2d3d" else 1)
    tail = (
        (a.shape[0] - cat.shape[0], b.shape[-1])
        if form == "2d3d"
        else (a.shape[1], b.shape[1] - cat.shape[1])
    )
    pad = torch.zeros(tail, dtype=cat.dtype, device=cat.device)
    return torch.cat([cat, pad], dim=0 if form == "2d3d" else 1)


def test_compile(device):
    from tritonblas import caches

    caches.invalidate()  # nothing selected before: tracing must not select (it reads files)
    case = CASES[0]
    a, b, offs, bias = operands(case, device)

    def f(a, b, offs, bias):
        return tritonblas.grouped_mm(a, b, offs=offs, bias=bias) * 2

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert_close(compiled(a, b, offs, bias) / 2, a, b, offs, bias)


def _bad(device):
    a, b, offs, _ = operands(Case("2d3d", 3, 20, 8, 16, (5, 5, 5)), device)
    return [
        ("offs int64", dict(mat_a=a, mat_b=b, offs=offs.long()), TypeError, "offs"),
        ("offs missing", dict(mat_a=a, mat_b=b, offs=None), ValueError, "offs"),
        ("offs length", dict(mat_a=a, mat_b=b, offs=offs[:2]), ValueError, "offs"),
        ("offs 2-D", dict(mat_a=a, mat_b=b, offs=offs[None]), ValueError, "offs"),
        ("mismatched K", dict(mat_a=a[:, :8], mat_b=b, offs=offs), ValueError, "mat_a"),
        ("dtype", dict(mat_a=a, mat_b=b.double(), offs=offs), TypeError, "mat_b"),
        ("int operands", dict(mat_a=a.int(), mat_b=b, offs=offs), TypeError, "mat_a"),
        ("1-D", dict(mat_a=a[0], mat_b=b, offs=offs), ValueError, "mat_a"),
        (
            "bias shape",
            dict(mat_a=a, mat_b=b, offs=offs, bias=torch.zeros(8, device=device)),
            ValueError,
            "bias",
        ),
        ("out_dtype", dict(mat_a=a, mat_b=b, offs=offs, out_dtype=torch.int8), TypeError, "out_dtype"),
        ("3d3d offs", dict(mat_a=a[None].expand(3, 20, 16), mat_b=b, offs=offs), ValueError, "offs"),
        ("backend", dict(mat_a=a, mat_b=b, offs=offs, backend="cublas"), ValueError, "backend"),
    ]


CPU_OFFS = [("decreasing", [5, 3, 20]), ("past the rows", [5, 10, 21]), ("negative", [-1, 3, 20])]


@pytest.mark.parametrize("index", range(12))
def test_bad_input(index, device):
    name, kwargs, error, word = _bad(device)[index]
    with pytest.raises(error, match=word):
        tritonblas.grouped_mm(kwargs.pop("mat_a"), kwargs.pop("mat_b"), **kwargs)


@pytest.mark.parametrize("name,values", CPU_OFFS)
def test_bad_offs_values_on_cpu(name, values):
    a, b, _, _ = operands(Case("2d3d", 3, 20, 8, 16, (5, 5, 5)), "cpu")
    with pytest.raises(ValueError, match="offs"):
        tritonblas.grouped_mm(a, b, offs=torch.tensor(values, dtype=torch.int32))


# --- transparent mode, recording, the shapes format ------------------------------------------------------


def _spy_launches(monkeypatch) -> list:
    launched = []
    real = grouped_launch.launch
    monkeypatch.setattr(grouped_launch, "launch", lambda spec: (launched.append(spec), real(spec))[1])
    return launched


def test_transparent_mode_routes_torch_grouped_mm(device, monkeypatch):
    a, b, offs, _ = operands(Case("2d3d", 3, 40, 24, 32, (10, 0, 25), "nt", "bf16"), device)
    a.requires_grad_()
    launched = _spy_launches(monkeypatch)
    with tritonblas.enable():
        out = torch._grouped_mm(a, b, offs=offs)
        (out.float() * torch.linspace(-1, 1, out.numel(), device=device).view_as(out)).sum().backward()
    assert launched, "the routed call ran torch's kernel"
    assert (out[35:] == 0).all()
    assert_close(out.detach(), a.detach(), b, offs, None)
    ref = a.detach().double().requires_grad_()
    full = loop(ref.detach(), b, offs, None, torch.float64, torch.float64)  # (shape only)
    weight = torch.linspace(-1, 1, full.numel(), device=device, dtype=torch.float64).view_as(full)
    grad = torch.zeros_like(ref)
    for g, (s, e) in enumerate(zip([0, 10, 10], [10, 10, 35], strict=True)):
        grad[s:e] = weight[s:e] @ b[g].double().T
    err = (a.grad.double() - grad).norm() / grad.norm()
    assert err < 2e-2, err


def test_transparent_mode_leaves_what_grouped_mm_refuses_to_torch(device):
    a, b, offs, _ = operands(Case("2d3d", 3, 20, 16, 16, (5, 5, 5), "nt"), device)
    with tritonblas.enable(), pytest.raises(RuntimeError) as theirs:
        torch._grouped_mm(a, b, offs=offs.long())
    with pytest.raises(RuntimeError) as torch_own:
        torch._grouped_mm(a, b, offs=offs.long())
    assert type(theirs.value) is type(torch_own.value)


@pytest.mark.parametrize("route", ["explicit", "routed"])
def test_grouped_calls_are_recorded_from_the_first(route, device, tmp_path):
    from tritonblas.shapes import GroupedEntry, load_grouped

    path = tmp_path / "shapes.yaml"
    a, b, offs, _ = operands(Case("2d3d", 3, 20, 16, 24, (5, 5, 5), "nt", "fp16"), device)
    with tritonblas.enable(record=path):
        for _ in range(2):
            if route == "explicit":
                tritonblas.grouped_mm(a, b, offs=offs)
            else:
                torch._grouped_mm(a, b, offs=offs)
    assert load_grouped(path) == [GroupedEntry(groups=3, m=20, n=16, k=24, dtype="fp16", layout="nt")]


BAD_ENTRIES = [
    ("{op: grouped, m: 64, n: 32, k: 32}", "groups"),
    ("{op: grouped, groups: 4, m: 64, n: 32, k: 32, bias: row}", "bias"),
    ("{m: 64, n: 32, k: 32, groups: 4}", "groups"),
    ("{op: grouped, groups: 4, m: 64, n: 32, k: 32, group_sizes: uniform}", "group_sizes"),
    ("{op: grouped, groups: 4, m: 64, n: 32, k: 32, dtypes: [e4m3]}", "dtypes"),
]


@pytest.mark.parametrize("entry,word", BAD_ENTRIES)
def test_the_shapes_format_refuses_bad_grouped_entries(entry, word, tmp_path):
    from tritonblas.shapes import ShapesError, load_grouped

    path = tmp_path / "s.yaml"
    path.write_text(f"shapes:\n  - {entry}\n")
    with pytest.raises(ShapesError, match=word):
        load_grouped(path)


def test_a_torch_without_grouped_mm_still_has_the_op(device, monkeypatch):
    """torch before 2.8 has no torch._grouped_mm: the kernels run, and the vendor is a loop of torch.mm."""
    case = CASES[2]
    a, b, offs, bias = operands(case, device)
    monkeypatch.delattr(torch, "_grouped_mm")
    for backend in (None, "torch"):
        assert_close(tritonblas.grouped_mm(a, b, offs=offs, bias=bias, backend=backend), a, b, offs, bias)
