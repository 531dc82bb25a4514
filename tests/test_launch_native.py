"""launch.native: a prepared direct launch written as the words transparent mode's C++ kernels launch it
from (native/launch.h), on plans made by launch.gemm for real problems and a compiled kernel whose
signature is typed as triton's JIT types it (pointers, i32/i64, fp32; constexprs and None compiled in).
What cannot be said goes back to Python (None). The C++ side reads the records back and pools their
buffers here too, on the CPU; the C++ launch itself runs on the GPU (tests/test_gpu_transparent.py)."""

import shutil
import struct
import subprocess
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from tritonblas import GemmConfig, contract
from tritonblas.contract import FORMAT, MAX_BUFFERS, MAX_LAUNCHES, POOL_CAP_BYTES
from tritonblas.launch import gemm, native, prepared

POINTER_KINDS = (native.P_A, native.P_B, native.P_C, native.P_BIAS)


def _plan(m: int, n: int, k: int, bias: bool, config: GemmConfig | None = None) -> gemm.Plan:
    a = torch.randn(m, k, dtype=torch.float16)
    b = torch.randn(k, n, dtype=torch.float16)
    c = torch.empty(m, n, dtype=torch.float16)
    config = config or GemmConfig(block_m=32, block_n=32, block_k=32)
    bias_tensor = torch.randn(m, n, dtype=torch.float16) if bias else None
    return gemm.make_plan(a, b, c, bias_tensor, config, 4, "tf32")


# The launch's arguments after its pointers and integers (launch.prepared): the GEMMs' alpha, beta, host
# descriptors and scales; the reduce kernel's alpha, beta and scales; the pad copies' none.
GEMM_TAIL = [1.0, 0.5, None, None, None, None]


def _compile(plan: gemm.Plan, scratch_size: int = 0, pointers: int = 4, tail: list = GEMM_TAIL,
             **launcher) -> tuple[list, list[str]]:
    """What launch.gemm sets in a plan's state at its first launch (constexpr_args, compiled, direct), with
    the kernel's signature typed from the arguments it is launched with; (the arguments, their types)."""
    names = plan.kernel.arg_names
    args = [f"ptr{i}" for i in range(pointers)] + list(plan.ints) + tail
    plan.state.constexpr_args = tuple(plan.kwargs[name] for name in names[len(args):])
    args += plan.state.constexpr_args
    assert len(args) == len(names)  # the launch's argument list is the kernel's parameter list
    types = [_type(i, value, names[i] in plan.kwargs, pointers) for i, value in enumerate(args)]
    run = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False, **launcher)
    src = SimpleNamespace(signature=dict(zip(names, types, strict=True)))
    plan.state.compiled = SimpleNamespace(function=0xC0FFEE, run=run, src=src,
                                          metadata=SimpleNamespace(num_warps=plan.num_warps, shared=4096))
    plan.state.direct = SimpleNamespace(scratch_bytes=scratch_size * plan.progs, descriptors=None)
    return args, types


def _type(index: int, value: object, constexpr: bool, pointers: int = 4) -> str:
    if constexpr or value is None or value == 1 and type(value) is int:  # (triton compiles 1 in)
        return "constexpr"
    if index < pointers or type(value) is str:  # (GEMM_TAIL's scales: "scale_a", "scale_b")
        return "*fp16"
    if type(value) is float:
        return "fp32"
    return "i64" if abs(value) >= 2**31 else "i32"


def _decode(words: list[int]) -> tuple[list[tuple[int, int]], list[tuple[list[int], list, list[int]]]]:
    """(each buffer's (bytes, zeroed), each launch's (head, (kind, value) per parameter, descriptor
    words)) of a record, which they fill exactly."""
    assert words[0] == FORMAT
    buffers, launches, at = words[1], words[2], contract.HEAD
    pairs = [tuple(words[at + 2 * i:at + 2 * i + 2]) for i in range(buffers)]
    at += native.BUFFER_WORDS * buffers
    decoded = []
    for _ in range(launches):
        head = words[at:at + contract.LAUNCH_HEAD]
        at += contract.LAUNCH_HEAD
        count, descs = head[5], head[6]
        params = [(words[at + 2 * i], words[at + 2 * i + 1]) for i in range(count)]
        at += 2 * count
        decoded.append((head, params, words[at:at + contract.DESC_WORDS * descs]))
        at += contract.DESC_WORDS * descs
    assert at == len(words)
    return pairs, decoded


def _one_launch(words: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """(the head, each parameter's (kind, value)) of a record of one launch and no buffer."""
    buffers, launches = _decode(words)
    assert buffers == [] and len(launches) == 1
    return launches[0][:2]


CASES = [  # (m, n, k, bias, global scratch a program)
    (8, 16, 24, True, 0),
    (33, 17, 64, False, 0),
    (1, 128, 40, True, 128),
]


@pytest.mark.parametrize("m,n,k,bias,scratch", CASES)
def test_a_record_says_each_argument_the_launcher_passes(m, n, k, bias, scratch):
    plan = _plan(m, n, k, bias)
    args, types = _compile(plan, scratch)
    head, pairs = _one_launch(native.launch_record(plan, bias))
    assert head == [0xC0FFEE, plan.progs, 32 * plan.num_warps, 4096, scratch * plan.progs, len(pairs), 0]
    passed = [(value, ty) for value, ty in zip(args, types, strict=True) if ty != "constexpr"]
    assert len(pairs) == len(passed) + 2
    for (kind, word), (value, ty) in zip(pairs[:-2], passed, strict=True):
        if ty == "*fp16":
            slot = int(value[3:])
            assert kind == (POINTER_KINDS[slot] if slot != 3 or bias else native.P_C) and word == 0
        elif ty == "fp32":
            assert (kind, word) == ((native.P_ALPHA if value == 1.0 else native.P_BETA), 0)
        else:
            assert (kind, word) == ({"i32": native.P_I32, "i64": native.P_I64}[ty], value)
    assert pairs[-2:] == [(native.P_SCRATCH if scratch else native.P_NULL, 0), (native.P_NULL, 0)]


def test_arguments_of_each_type():
    template = (native._A, native._B, 7, 2**40, native._ALPHA, 2.5, *native._SCALES, native._BIAS, "dropped")
    types = ["*bf16", "*bf16", "i32", "i64", "fp32", "fp32", "*fp32", "*fp32", "*bf16", "constexpr"]
    assert native._params(types, template) == [
        (native.P_A, 0), (native.P_B, 0), (native.P_I32, 7), (native.P_I64, 2**40), (native.P_ALPHA, 0),
        (native.P_F32, struct.unpack("<q", struct.pack("<d", 2.5))[0]), (native.P_SCALE_A, 0),
        (native.P_SCALE_B, 0), (native.P_BIAS, 0)]


def test_a_pointer_where_the_template_holds_none_is_refused():
    """None is compiled in (a constexpr): a pointer parameter there means the plan is not the template's
    (a scaled_mm plan written without its scales), so nothing is written."""
    assert native._params(["*bf16", "*fp32"], (native._A, None)) is None


def _scaled_plan(bias: bool) -> gemm.Plan:
    """A scaled_mm launch (fp8 operands, row-wise scales, bf16 out), compiled with its scales typed."""
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(32, 48).to(torch.float8_e4m3fn)
    c = torch.empty(16, 48, dtype=torch.bfloat16)
    bias_tensor = torch.randn(16, 48, dtype=torch.bfloat16) if bias else None
    plan = gemm.make_plan(a, b, c, bias_tensor, GemmConfig(block_m=32, block_n=32, block_k=32), 4, "tf32",
                          (torch.rand(16), torch.rand(48)))
    _compile(plan, tail=[1.0, 0.5, None, None, "scale_a", "scale_b"])
    return plan


@pytest.mark.parametrize("bias", [True, False])
def test_a_scaled_record_passes_the_calls_scales_after_alpha_and_beta(bias):
    """scaled_mm's launch (transparent mode's aten::_scaled_mm): the call's scales are the parameters
    after alpha and beta; the same plan written as a plain GEMM's record is refused."""
    plan = _scaled_plan(bias)
    _, pairs = _one_launch(native.launch_record(plan, bias, scaled=True))
    at = pairs.index((native.P_ALPHA, 0))
    assert pairs[at:at + 4] == [(native.P_ALPHA, 0), (native.P_BETA, 0), (native.P_SCALE_A, 0),
                                (native.P_SCALE_B, 0)]
    assert pairs[3] == ((native.P_BIAS if bias else native.P_C), 0)
    assert native.launch_record(plan, bias) is None


def _with(plan: gemm.Plan, **fields) -> gemm.Plan:
    """`plan` with other description fields (a plan is frozen), keeping what its first launch wrote."""
    made = replace(plan, **fields)
    made.state.compiled, made.state.constexpr_args, made.state.direct = \
        plan.state.compiled, plan.state.constexpr_args, plan.state.direct
    return made


_NOT_DIRECT = SimpleNamespace(state=SimpleNamespace(direct=None))  # a launch with no direct one


REFUSED = {  # what a record cannot say: the launch stays Python's (each gives the plan to record)
    "host descriptors of no geometry": lambda plan: _with(plan, descs=((1,), (1,))),
    "a pad copy not planned yet": lambda plan: _with(plan, copies=(_pad_copy(None), None)),
    "a pad copy not launched directly": lambda plan: _with(plan, copies=(None, _pad_copy(_NOT_DIRECT))),
    "a reduce kernel not launched directly": lambda plan: _with(plan, then=_NOT_DIRECT),
    "not launched directly": lambda plan: setattr(plan.state, "direct", None) or plan,
    "not compiled": lambda plan: setattr(plan.state, "compiled", None) or plan,
    "PDL": lambda plan: setattr(plan.state.compiled.run, "launch_pdl", True) or plan,
    "a cooperative grid":
    lambda plan: setattr(plan.state.compiled.run, "launch_cooperative_grid", True) or plan,
    "an unknown launcher": lambda plan: delattr(plan.state.compiled.run, "launch_pdl") or plan,
    "a bool argument": lambda plan: plan.state.compiled.src.signature.update(M="i1") or plan,
    "a tuple argument": lambda plan: plan.state.compiled.src.signature.update(M=("i32", "i32")) or plan,
    "another argument count": lambda plan: plan.state.compiled.src.signature.update(extra="i32") or plan,
    "no signature": lambda plan: setattr(plan.state.compiled, "src", None) or plan,
    "a pointer given a constant": lambda plan: plan.state.compiled.src.signature.update(M="*fp16") or
    _with(plan, ints=("x", *plan.ints[1:])),
}


def _pad_copy(plan: object) -> object:
    return SimpleNamespace(plan=plan, shape=(4, 4), lead=8, itemsize=2)


@pytest.mark.parametrize("why", list(REFUSED))
def test_what_a_record_cannot_say_is_left_to_python(why):
    plan = _plan(16, 16, 16, True)
    _compile(plan)
    assert native.launch_record(plan, True) is not None
    assert native.launch_record(REFUSED[why](plan), True) is None


@pytest.mark.parametrize("config,has", [
    (GemmConfig(block_m=32, block_n=32, block_k=32), True),
    (GemmConfig(block_m=64, block_n=64, block_k=64, tma=True), True),
    (GemmConfig(block_m=64, block_n=64, block_k=64, tma=True, host_descriptors=True), True),
    (GemmConfig(block_m=32, block_n=32, block_k=32, streamk=True), True),
    (GemmConfig(block_m=32, block_n=32, block_k=32, aligned_copy=True), True),
    (GemmConfig.vendor(), False),
    (None, False),
])
def test_which_configs_get_a_record(config, has):
    assert native.config_has_record(config) is has


# triton's tensordesc metadata of A's and B's descriptors (bf16: its device dtype code 10, 2 bytes)
DESC_META = ({"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [16, 64], "fp4_padded": False},
             {"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [64, 32], "fp4_padded": False})


GEOMETRY = (([48, 128], [128, 1], [16, 64]), ([128, 96], [96, 1], [64, 32]))


def _descriptor_plan() -> gemm.Plan:
    """A GEMM's plan whose kernel takes host descriptors of A and B (GEOMETRY, DESC_META)."""
    plan = replace(_plan(48, 96, 128, True), descs=GEOMETRY)  # (prepare_launch's geometry, given)
    _compile(plan)
    for name in ("a_host", "b_host"):
        plan.state.compiled.src.signature[name] = "tensordesc<bf16[16, 64]>"
    plan.state.direct.descriptors = tuple(zip(GEOMETRY, DESC_META, strict=True))
    return plan


def test_host_descriptors_are_encoded_per_call_from_their_geometry():
    """A kernel taking host descriptors: each is the encoded map (P_DESC, its slot) then its shape (i32)
    and strides (i64), as triton expands it, and the record holds what the encoding passes
    cuTensorMapEncodeTiled (dims and box innermost first, the row stride in bytes)."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    plan = _descriptor_plan()
    geometry = GEOMETRY
    words = native.launch_record(plan, True)
    head, pairs = _one_launch(words)
    assert head[6] == 2
    at = pairs.index((native.P_ALPHA, 0)) + 2
    assert pairs[at:at + 10] == [
        (native.P_DESC, 0), (native.P_I32, 48), (native.P_I32, 128), (native.P_I64, 128), (native.P_I64, 1),
        (native.P_DESC, 1), (native.P_I32, 128), (native.P_I32, 96), (native.P_I64, 96), (native.P_I64, 1)]
    code = TMA_DTYPE_DEVICE_TO_HOST[10]
    assert words[-20:] == [native.P_A, 0, code, 3, 0, 128, 48, 256, 64, 16,
                           native.P_B, 0, code, 3, 0, 96, 128, 192, 32, 64]
    padded = {**DESC_META[0], "fp4_padded": True}
    plan.state.direct.descriptors = ((geometry[0], padded), (geometry[1], DESC_META[1]))
    assert native.launch_record(plan, True) is None  # fp4 padding: not a plain tiled descriptor


def _streamk_plan() -> gemm.Plan:
    """Stream-K with its reduce kernel: one tile split 4 ways on 4 programs."""
    config = GemmConfig(block_m=32, block_n=32, block_k=32, streamk=True, reduce_kernel=True)
    plan = _plan(32, 32, 256, True, config)
    _compile(plan, pointers=6)
    _compile(plan.then, pointers=3, tail=[1.0, 0.5, None, None])
    return plan


def test_a_streamk_record_holds_its_workspace_and_its_reduce_launch():
    """Stream-K: the partials and the tile counters are buffers (the counters zeroed per call), passed to
    the GEMM after its bias, and the reduce kernel's launch follows on the partials."""
    plan = _streamk_plan()
    assert plan.workspace is not None and plan.then is not None
    buffers, launches = _decode(native.launch_record(plan, True))
    floats, counters = plan.workspace
    assert buffers == [(4 * floats, 0), (4 * counters, 1)]
    assert [head[1] for head, _, _ in launches] == [plan.progs, plan.then.progs]
    (_, gemm_params, _), (_, reduce_params, _) = launches
    assert gemm_params[:6] == [(native.P_A, 0), (native.P_B, 0), (native.P_C, 0), (native.P_BIAS, 0),
                               (native.P_BUF, 0), (native.P_BUF, 1)]
    assert reduce_params[:3] == [(native.P_BUF, 0), (native.P_C, 0), (native.P_BIAS, 0)]
    assert (native.P_ALPHA, 0) in reduce_params and (native.P_BETA, 0) in reduce_params


def _padded_plan() -> gemm.Plan:
    """A prepared launch that copies A (rows of 18 bytes) into a buffer of 16-element rows."""
    config = GemmConfig(block_m=16, block_n=16, block_k=16, aligned_copy=True)
    a = torch.randn(13, 9, dtype=torch.float16)
    b = torch.randn(9, 16, dtype=torch.float16)
    plan = prepared.prepare_launch(a, b, torch.empty(13, 16, dtype=torch.float16), None, config, 4, "tf32")
    plan.copies[0].plan = gemm._copy_plan(a, plan.copies[0].lead, True)
    _compile(plan.copies[0].plan, pointers=2, tail=[])
    _compile(plan)
    return plan


def test_a_padded_record_copies_into_a_buffer_the_gemm_then_reads():
    """Padded copies: the copy's launch reads the call's operand and writes a buffer of the padded size,
    and the GEMM reads that buffer in the operand's place."""
    plan = _padded_plan()
    copy, none = plan.copies
    assert none is None and copy.lead == 16
    buffers, launches = _decode(native.launch_record(plan, False))
    assert buffers == [(13 * 16 * 2, 0)]
    (_, copy_params, _), (_, gemm_params, _) = launches
    assert copy_params[:2] == [(native.P_A, 0), (native.P_BUF, 0)]
    assert gemm_params[:4] == [(native.P_BUF, 0), (native.P_B, 0), (native.P_C, 0), (native.P_C, 0)]


# The C++ side's reading of records (native/launch.cpp's parse_launch) and its buffer pool, on the CPU
# through the library's test ops: `parsed` gives back the words of what it read (empty: refused),
# `pool_probe` takes and gives buffer sets as calls do. The launches themselves run on the GPU only.
@pytest.fixture
def cpp():
    from tritonblas import native as library

    if not library.load():
        if shutil.which("c++") or shutil.which("g++"):
            pytest.fail(f"a C++ compiler is here, yet the C++ side did not build: {library.why_not()}")
        pytest.skip(f"no C++ side here: {library.why_not()}")
    return library.ops()


def _records() -> dict[str, list[int]]:
    """Records of stubbed prepared launches: plain GEMMs, host descriptors, Stream-K, a padded copy."""
    records = {}
    for m, n, k, bias, scratch in CASES:
        plan = _plan(m, n, k, bias)
        _compile(plan, scratch)
        records[f"{m}x{n}x{k}"] = native.launch_record(plan, bias)
    records["descriptors"] = native.launch_record(_descriptor_plan(), True)
    records["streamk"] = native.launch_record(_streamk_plan(), True)
    records["padded"] = native.launch_record(_padded_plan(), False)
    records["scaled"] = native.launch_record(_scaled_plan(True), True, scaled=True)
    return records


def test_cpp_reads_every_field_of_the_records_python_writes(cpp):
    for name, words in _records().items():
        assert words is not None, name
        assert list(cpp.parsed(words)) == words, name


def _record(buffers: list[tuple[int, int]], params: list[tuple[int, int]], scratch: int = 0,
            launches: int = 1) -> list[int]:
    """A record of `launches` launches of one kernel taking `params`, sharing `buffers`."""
    words = [FORMAT, len(buffers), launches, *(w for pair in buffers for w in pair)]
    for _ in range(launches):
        words += [0xC0FFEE, 4, 128, 0, scratch, len(params), 0, *(w for pair in params for w in pair)]
    return words


GOOD = _record([(64, 0), (16, 1)], [(native.P_A, 0), (native.P_BUF, 1), (native.P_I32, -7)])
MALFORMED = {
    "cut short": GOOD[:-1],
    "a word too many": [*GOOD, 0],
    "another format": [FORMAT + 1, *GOOD[1:]],
    "no launch": _record([], [], launches=0),
    "too many launches": _record([], [(native.P_A, 0)], launches=MAX_LAUNCHES + 1),
    "too many buffers": _record([(16, 0)] * (MAX_BUFFERS + 1), [(native.P_A, 0)]),
    "an empty buffer": _record([(0, 0)], [(native.P_A, 0)]),
    "an unknown kind": _record([], [(native.P_SCALE_B + 1, 0)]),
    "a buffer it does not have": _record([(16, 0)], [(native.P_BUF, 1)]),
    "global scratch it does not have": _record([], [(native.P_SCRATCH, 0)]),
    "an i32 out of range": _record([], [(native.P_I32, 2**31)]),
    "too many parameters": _record([], [(native.P_NULL, 0)] * (native.MAX_PARAMS + 1)),
}


@pytest.mark.parametrize("why", list(MALFORMED))
def test_cpp_refuses_a_malformed_record(cpp, why):
    """A record parse_launch refuses leaves the key asking Python (route.cpp's remember_routed)."""
    assert list(cpp.parsed(GOOD)) == GOOD
    assert list(cpp.parsed(MALFORMED[why])) == []


TAKE, GIVE, CAPTURED = 0, 1, 2  # pool_probe's steps


def _calls(cpp, record: list[int], *steps: tuple[int, int]) -> list[tuple[int, bool, bool]]:
    """Per set taken: (its first buffer's address, whether it goes back to the pool, its zeroed buffers
    zero)."""
    out = list(cpp.pool_probe(record, [w for step in steps for w in step]))
    return [(out[i], bool(out[i + 1]), bool(out[i + 2])) for i in range(0, len(out), 3)]


def test_cpp_pool_hands_a_set_to_one_call_at_a_time(cpp):
    record = _record([(4096, 0), (256, 1)], [(native.P_BUF, 0), (native.P_BUF, 1)])
    first, second, third, fourth = _calls(cpp, record, (TAKE, 0), (TAKE, 0), (GIVE, 0), (TAKE, 0), (TAKE, 1))
    assert all(kept and zero for _, kept, zero in (first, second, third, fourth))
    assert second[0] != first[0]  # both held at once: two sets
    assert third[0] == first[0]  # given back, taken again on its stream
    assert fourth[0] not in (first[0], second[0])  # another stream never shares


def test_cpp_pool_keeps_nothing_under_capture_or_past_its_cap(cpp):
    record = _record([(4096, 1)], [(native.P_BUF, 0)])
    pooled, captured, again = _calls(cpp, record, (TAKE, 0), (GIVE, 0), (CAPTURED, 0), (GIVE, 1), (TAKE, 0))
    assert pooled[1] and not captured[1] and captured[2]  # the graph's own set, zeroed
    assert again[0] == pooled[0] != captured[0]
    huge = _record([(POOL_CAP_BYTES + 16, 0)], [(native.P_BUF, 0)])  # allocated, never touched
    (alone,) = _calls(cpp, huge, (TAKE, 0), (GIVE, 0))
    assert not alone[1]


def test_a_stream_handle_is_known_only_where_the_stream_type_gives_it(tmp_path):
    """native/stream.h: c10::Stream::native_handle() came with torch 2.11. Where the type lacks it the
    handle is unknown (the call is launched from Python), never a null pointer, which is the legacy
    default stream's handle."""
    from tritonblas import native as library

    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "t.cpp").write_text(
        '#include "stream.h"\n#include <cstdint>\n#include <cstdio>\n'
        "struct Old {};\n"
        "struct New { void* native_handle() const { return reinterpret_cast<void*>(16); } };\n"
        "struct Default { void* native_handle() const { return nullptr; } };\n"
        "using tritonblas_native::stream_handle;\n"
        "int main() {\n"
        "  auto o = stream_handle(Old{}); auto n = stream_handle(New{}); auto d = stream_handle(Default{});\n"
        '  std::printf("%d %d %d %d %d", int(o.has_value()), int(n.has_value()), int(uintptr_t(*n)),\n'
        "              int(d.has_value()), int(uintptr_t(*d)));\n"
        "}\n"
    )
    exe = tmp_path / "t"
    built = subprocess.run([cxx, "-std=c++17", f"-I{library.HERE}", str(tmp_path / "t.cpp"), "-o", str(exe)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout == "0 1 16 1 0"
