"""triton's C launcher called directly, for a compiled kernel's every launch after its first (launch.gemm:
the call path's prepared launches, and launch_gemm's own plans but those with host descriptors).

`CompiledKernel.run` is Python around a C function: per call it checks for scratch, re-encodes every
host TMA descriptor (a Python loop over all ~50 arguments, then cuTensorMapEncodeTiled), and for each
tensor argument calls its data_ptr() and the driver's cuPointerGetAttribute. For a kernel launched
again and again with the same facts, all of that is decided once here: pointers go in as integers
(the plan checked the tensors' device; the C launcher takes an int as the address itself), a
descriptor's encoding is kept per base address (it depends on nothing else in a plan), and the C
function is called with the argument list `run` would build (no launch hooks: launch.gemm never passed
triton's). H200 host, 4x2048x2048 bf16: run with tensors 10.1 us a launch, with integers 8.6
(docs/notes/kernel-levers.md, "Host cost of a launch").

Two calling conventions exist: triton 3.6 takes the kernel's arguments flat after the launch's own,
3.7 to 3.9 as one tuple with the argument annotations before it. A launcher of neither shape, or one
that needs profiling scratch, gsan or a cluster, gets None: launch.gemm keeps calling `run`.

Device-side tensor descriptors need global scratch: each program writes its descriptors there. `run`
asks triton's allocator for it at every launch (a torch.empty through the ContextVar set by
scratch.ensure_allocator); here the launch takes a buffer from launch/scratch.py's pool, by device and
stream, and gives it back once the kernel is enqueued (a later launch on that stream runs after it),
as every other piece of scratch. Under graph capture it is allocated per launch.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

from . import scratch

# Encodings kept per descriptor slot of a plan: a decode loop's activations cycle through a few addresses
# (torch's caching allocator); past this many the slot starts over.
DESCRIPTOR_CACHE = 64


# The triton versions whose launchers `make` was written against (3.6 and 3.9 run on the H200, 3.7 and
# 3.8 read from their sources): where the call path may count on a direct launch (`expected`).
KNOWN_TRITON = ("3.6", "3.7", "3.8", "3.9")


@functools.cache
def expected() -> bool:
    """Whether this triton's launches are expected to go direct (make() still decides per kernel)."""
    import triton

    return ".".join(triton.__version__.split(".")[:2]) in KNOWN_TRITON


def launches_directly(plan: object) -> bool:
    """Whether a plan of launch.prepared.prepare_launch (None: none) is expected to launch through `make`'s
    launch after its first launch, its host cost then no more than torch's own op's: no padded copies
    or Stream-K workspace (launches and scratch of their own), on a triton `expected()`."""
    return plan is not None and plan.copies is None and plan.workspace is None and expected()


class DirectLaunch:
    """One compiled kernel's launch through the C launcher: `launch(stream, args)` with args the kernel's
    arguments as `CompiledKernel.run` takes them after its hooks (constexprs included), host
    descriptors already expanded by `descriptor`."""

    __slots__ = ("_raw", "scratch_bytes", "_geometry", "_describe", "_meta", "_encode", "_encodings")

    def __init__(self, launch: Callable[[int, tuple, object], None], scratch_bytes: int,
                 geometry: tuple | None, describe: Callable | None, meta: list | None,
                 encode: Callable | None) -> None:
        self._raw, self.scratch_bytes = launch, scratch_bytes
        self._geometry, self._describe, self._meta, self._encode = geometry, describe, meta, encode
        self._encodings: tuple[dict, ...] = tuple({} for _ in geometry or ())

    @property
    def descriptors(self) -> tuple | None:
        """((shape, strides, box), triton's tensordesc metadata) of A's and B's host descriptors; None
        where the kernel takes none (launch/native.py encodes them in C++ from these)."""
        if self._geometry is None:
            return None
        return tuple(zip(self._geometry, self._meta, strict=True))

    def launch(self, stream: int, args: tuple) -> None:
        """Launch on `stream` (the current one of the current device) with the kernel's arguments."""
        if not self.scratch_bytes:
            self._raw(stream, args, None)
            return
        free, buf = scratch.descriptor_buffer(self.scratch_bytes)
        self._raw(stream, args, buf.data_ptr())
        if free is not None:  # enqueued: the next user on this stream runs after it
            free.append(buf)

    def descriptor(self, slot: int, base: object, ptr: int) -> tuple:
        """The launcher's arguments for host descriptor `slot` (in the kernel's order: 0 A, 1 B, then any
        other) at `ptr`: (encoded map, *shape, *strides), as triton's own expansion makes them."""
        kept = self._encodings[slot]
        args = kept.get(ptr)
        if args is None:
            if len(kept) >= DESCRIPTOR_CACHE:
                kept.clear()
            args = tuple(self._encode(self._describe(base, *self._geometry[slot]), self._meta[slot]))
            kept[ptr] = args
        return args


def make(compiled: object, progs: int, geometry: tuple | None = None,
         describe: Callable | None = None) -> DirectLaunch | None:
    """The direct launch of `compiled` (a CompiledKernel whose handles are loaded) on a 1-D grid of
    `progs` programs, host descriptors of `geometry` ((shape, strides, box) of each, in the kernel's
    order: A and B, the Gluon kernels' output too; None: none) made by describe(base tensor, shape,
    strides, box) (a triton TensorDescriptor: the encoding reads its base, shape and strides, the
    compiled kernel's metadata the rest, Gluon's layout included);
    None where this triton's launcher is not one this module knows, or the launch needs more than
    its arguments and global scratch (profiling scratch, a gsan check, a cluster)."""
    launcher = compiled.run
    if getattr(launcher, "profile_scratch_size", 1) or getattr(launcher, "gsan_enabled", False) or \
            getattr(launcher, "num_ctas", 1) != 1:
        return None
    scratch_bytes = progs * getattr(launcher, "global_scratch_size", 0)  # (what run allocates, 1 CTA)
    raw = _raw_launch(launcher)
    if raw is None:
        return None
    encode = meta = None
    if geometry is not None:
        meta = getattr(compiled.metadata, "tensordesc_meta", None)
        encode = _encoder()
        if not meta or len(meta) != len(geometry) or encode is None:
            return None
    head = (progs, 1, 1)
    fn, meta_pack = compiled.function, compiled.packed_metadata
    coop, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    if hasattr(launcher, "arg_annotations"):  # 3.7+: (..., annotations, signature, args)
        annotations, signature = launcher.arg_annotations, launcher.kernel_signature

        def launch(stream: int, args: tuple, global_scratch: int | None) -> None:
            raw(*head, stream, fn, coop, pdl, meta_pack, None, None, None, global_scratch, None, annotations,
                signature, args)
    else:  # 3.6: (..., scratch, scratch, metadata, launch metadata, hooks, *args)

        def launch(stream: int, args: tuple, global_scratch: int | None) -> None:
            raw(*head, stream, fn, coop, pdl, global_scratch, None, meta_pack, None, None, None, *args)

    return DirectLaunch(launch, scratch_bytes, geometry, describe, meta, encode)


def _raw_launch(launcher: object) -> Callable | None:
    """The C function behind `launcher.launch` (3.6 and 3.7+ wrap it in `inner` where the kernel takes
    host descriptors; the wrapper only expands them)."""
    launch = getattr(launcher, "launch", None)
    if isinstance(launch, types.FunctionType) and launch.__name__ == "inner" and launch.__closure__:
        cells = dict(zip(launch.__code__.co_freevars, launch.__closure__, strict=True))
        launch = cells["launcher"].cell_contents if "launcher" in cells else None
    return launch if _is_c_function(launch) else None


def _is_c_function(fn: object) -> bool:
    """Whether `fn` is a C function, as triton's launchers are (any Python wrapper is unknown here)."""
    return isinstance(fn, types.BuiltinFunctionType)


def _encoder() -> Callable | None:
    """triton's expansion of one host descriptor (its make_tensordesc_arg: two parameters up to 3.7,
    three from 3.8), as f(descriptor, metadata)."""
    try:
        from triton.backends.nvidia.driver import make_tensordesc_arg
    except ImportError:
        return None
    if make_tensordesc_arg.__code__.co_argcount == 3:
        return lambda desc, meta: make_tensordesc_arg(desc, meta, None)
    return make_tensordesc_arg
