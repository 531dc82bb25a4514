"""launch.direct: triton's C launcher called without CompiledKernel.run's Python, on launchers shaped as
triton 3.6's (kernel arguments flat) and 3.7-3.9's (one tuple after the annotations), with and without
host descriptors and with device-side ones (global scratch from the pool); anything else (profiling
scratch, gsan, a Python wrapper it does not know) keeps `run`. The
real launchers are exercised on the GPU (tests/test_gpu_launch.py)."""

from types import SimpleNamespace

import pytest

from tritonblas.launch import direct

GEOMETRY = (([8, 4], [4, 1], [8, 4]), ([4, 16], [16, 1], [4, 16]))


def describe(base, shape, strides, block):
    """Stands for launch.gemm.descriptor (a TensorDescriptor of the geometry on `base`)."""
    return SimpleNamespace(base=base, shape=shape, strides=strides, block_shape=block)
META = [{"slot": "a"}, {"slot": "b"}]


class Recorder:
    """Stands for the C function: records every call's positional arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def launcher(style: str, raw, descs: bool, **overrides) -> SimpleNamespace:
    """A CompiledKernel-like object whose `run` has the attributes triton's CudaLauncher has."""
    launch = raw
    if descs:  # triton's wrapper: a closure named inner over `launcher`
        def make_inner(launcher):
            def inner(*args):
                return launcher(*args)
            return inner
        launch = make_inner(raw)
    run = SimpleNamespace(launch=launch, global_scratch_size=0, profile_scratch_size=0, num_ctas=1,
                          launch_cooperative_grid=False, launch_pdl=True)
    if style == "tuple":
        run.arg_annotations, run.kernel_signature = "ANN", "SIG"
    for name, value in overrides.items():
        setattr(run, name, value)
    return SimpleNamespace(run=run, function=0xF00, packed_metadata=(4, 1, 0),
                           metadata=SimpleNamespace(tensordesc_meta=META if descs else None))


@pytest.fixture
def c_functions(monkeypatch):
    """The Recorder passes for a C function."""
    monkeypatch.setattr(direct, "_is_c_function", lambda fn: isinstance(fn, Recorder))


@pytest.mark.parametrize("style", ["flat", "tuple"])
def test_launch_passes_what_run_would_pass(style, c_functions):
    raw = Recorder()
    fast = direct.make(launcher(style, raw, False), 132, None)
    fast.launch(77, (1, 2, 3, 4.0, None, "C"))
    (call,) = raw.calls
    head = (132, 1, 1, 77, 0xF00, False, True)
    if style == "flat":  # 3.6: scratch, scratch, metadata, launch metadata, hooks, then the arguments
        assert call == (*head, None, None, (4, 1, 0), None, None, None, 1, 2, 3, 4.0, None, "C")
    else:  # 3.7+: metadata, launch metadata, hooks, scratch, scratch, annotations, signature, arguments
        assert call == (*head, (4, 1, 0), None, None, None, None, None, "ANN", "SIG",
                        (1, 2, 3, 4.0, None, "C"))


@pytest.mark.parametrize("style", ["flat", "tuple"])
def test_descriptors_are_encoded_once_per_address(style, c_functions, monkeypatch):
    encoded = []

    def encode(desc, meta):
        encoded.append((desc.base, desc.shape, desc.strides, desc.block_shape, meta["slot"]))
        return [f"map{len(encoded)}", *desc.shape, *desc.strides]

    monkeypatch.setattr(direct, "_encoder", lambda: encode)
    raw = Recorder()
    fast = direct.make(launcher(style, raw, True), 4, GEOMETRY, describe)
    assert fast is not None  # found the C function behind triton's `inner`
    first = fast.descriptor(0, "x1", 4096)
    assert first == ("map1", 8, 4, 4, 1)
    assert fast.descriptor(0, "x1", 4096) is first  # same address: kept
    assert fast.descriptor(1, "w", 4096) == ("map2", 4, 16, 16, 1)  # the other slot has its own
    assert fast.descriptor(0, "x2", 8192)[0] == "map3"
    assert [e[0] for e in encoded] == ["x1", "w", "x2"]
    assert encoded[0][1:] == ([8, 4], [4, 1], [8, 4], "a")


def test_descriptor_cache_starts_over_when_full(c_functions, monkeypatch):
    monkeypatch.setattr(direct, "_encoder", lambda: lambda desc, meta: [desc.base])
    monkeypatch.setattr(direct, "DESCRIPTOR_CACHE", 2)
    fast = direct.make(launcher("tuple", Recorder(), True), 4, GEOMETRY, describe)
    for ptr in (16, 32, 48, 16):
        assert fast.descriptor(0, f"t{ptr}", ptr) == (f"t{ptr}",)
    assert len(fast._encodings[0]) <= 2


@pytest.mark.parametrize("style", ["flat", "tuple"])
def test_device_side_descriptors_get_pooled_global_scratch(style, c_functions, monkeypatch):
    """A kernel that builds its tensor descriptors on the device writes them to global scratch: each
    launch passes a pooled buffer of progs x global_scratch_size bytes where run passes its allocator's,
    and gives it back once launched."""
    taken, given = [], []

    class Buffer:
        def data_ptr(self):
            return 0xBEEF

    class Free(list):
        def append(self, buf):
            given.append(buf)

    free, buf = Free(), Buffer()
    monkeypatch.setattr(direct.scratch, "descriptor_buffer",
                        lambda nbytes: taken.append(nbytes) or (free, buf))
    raw = Recorder()
    fast = direct.make(launcher(style, raw, False, global_scratch_size=128), 132, None)
    fast.launch(77, (1, 2))
    (call,) = raw.calls
    assert taken == [132 * 128] and given == [buf]
    assert call[7 if style == "flat" else 11] == 0xBEEF  # where run puts its global scratch


@pytest.mark.parametrize("overrides", [
    {"profile_scratch_size": 64},
    {"gsan_enabled": True},
    {"num_ctas": 2},
], ids=lambda o: next(iter(o)))
def test_launches_needing_more_than_arguments_keep_run(overrides, c_functions):
    assert direct.make(launcher("tuple", Recorder(), False, **overrides), 4, None) is None


def test_unknown_launchers_keep_run():
    # A Python function that is not triton's descriptor wrapper, and a plain callable object: unknown.
    assert direct.make(launcher("flat", lambda *args: None, False), 4, None) is None
    assert direct.make(launcher("flat", Recorder(), False), 4, None) is None  # not a C function


def test_descriptors_without_triton_metadata_keep_run(c_functions):
    kernel = launcher("tuple", Recorder(), True)
    kernel.metadata.tensordesc_meta = None  # a backend that decomposes descriptors itself
    assert direct.make(kernel, 4, GEOMETRY, describe) is None
