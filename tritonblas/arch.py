"""What is known of a device: `DeviceInfo` (what the feasibility predicate and the heuristic need) and
the table of known archs (`ARCHS`, `device_for_arch`) for where only an arch's name is known."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceInfo:
    """What the feasibility predicate and the heuristic need to know of a device."""

    arch: str  # "sm_90", "gfx942", or "interpreter"
    name: str
    sm_count: int
    smem_per_block: int  # bytes of shared memory one program may use
    regs_per_sm: int = 65536


# The interpreter runs programs one after another on the CPU: no shared memory limit to speak of; a
# small "SM count" keeps default grids (and so test run time) small.
INTERPRETER_DEVICE = DeviceInfo(arch="interpreter", name="triton-interpreter", sm_count=4,
                                smem_per_block=232448)


@dataclass(frozen=True)
class ArchFacts:
    """What is known of an arch without its device: the shared memory one program may opt into, and the
    SM (CU) count of a reference part (a device that is present reports its own count)."""

    part: str
    sm_count: int
    smem_per_block: int


# Used where only the arch is known: config files and database keys (their headers carry the SM count
# of the device they were tuned on), `explain --arch`. Shared memory is CUDA's per-block opt-in maximum
# (64 KiB of LDS on AMD). Other parts of an arch differ in SM count: H100 PCIe 114, A40 84, L4 58.
ARCHS: dict[str, ArchFacts] = {
    "sm_80": ArchFacts("A100", 108, 166912),
    "sm_86": ArchFacts("A10", 72, 101376),
    "sm_89": ArchFacts("L40S", 142, 101376),
    "sm_90": ArchFacts("H100 SXM / H200", 132, 232448),
    "sm_100": ArchFacts("B200", 148, 232448),
    "sm_120": ArchFacts("RTX 5090", 170, 101376),
    "gfx90a": ArchFacts("MI250X (one GCD)", 110, 65536),
    "gfx942": ArchFacts("MI300X", 304, 65536),
    "interpreter": ArchFacts("Triton interpreter", INTERPRETER_DEVICE.sm_count,
                             INTERPRETER_DEVICE.smem_per_block),
}


def device_for_arch(arch: str, name: str = "", sm_count: int | None = None) -> DeviceInfo:
    """A DeviceInfo for an arch known only by name (an imported file's header, a DB key, --arch); the SM
    count is the reference part's (ARCHS) unless given."""
    facts = ARCHS.get(arch)
    if facts is None:
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    return DeviceInfo(arch=arch, name=name or arch, sm_count=sm_count or facts.sm_count,
                      smem_per_block=facts.smem_per_block)



# Archs whose copy engine takes tensor descriptors (and the interpreter, which emulates them).
TMA_ARCHS = ("sm_90", "sm_100", "sm_120", "interpreter")
# Archs whose tensor cores take e4m3fn / e5m2 operands, in triton's dot and in torch._scaled_mm: Ada and
# Hopper on (triton refuses fp8e4nv below sm_89; the AMD archs here have the fnuz variants instead), and
# the interpreter. int8 runs everywhere.
FP8_ARCHS = ("sm_89", "sm_90", "sm_100", "sm_120", "interpreter")
