// A routed call's kernel launched from C++ (route.cpp): the launch record the Python side made of a
// prepared direct launch (tritonblas/launch/native.py writes it), and its launch on a call's tensors.
//
// Why: a routed call whose kernel runs took the trip into Python, 55-73 us of host time a call inside a
// model's step against torch's own 21 (docs/benchmarks/h200.md, forty-fifth session), so transparent
// mode left every kernel that wins by less than that to torch in eager use. Here a key answered KERNEL
// launches the compiled kernel as triton's launcher does (cuLaunchKernel on the current stream, the
// kernel's non-constexpr arguments in order, then global and profile scratch), with no Python at all.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace tritonblas_native {

// Record layout (int64 words): FORMAT, function handle, grid (programs), threads a program, dynamic
// shared memory bytes, global scratch bytes (0: none), the count of kernel parameters, the count of host
// descriptors (0 or 2); a (kind, value) pair per parameter; DESC_WORDS per host descriptor. Kept in step
// with tritonblas/launch/native.py.
constexpr int64_t FORMAT = 1;
constexpr int64_t HEAD = 8;
constexpr size_t MAX_PARAMS = 96;
constexpr int64_t DESC_WORDS = 9;

// What a kernel parameter takes: the call's tensors' addresses, a constant, the call's alpha / beta, a
// host descriptor encoded for the call (value: its slot, 0 for A and 1 for B).
enum Kind : int64_t { P_A = 0, P_B = 1, P_C = 2, P_BIAS = 3, P_I32 = 4, P_I64 = 5, P_F32 = 6,
                      P_ALPHA = 7, P_BETA = 8, P_NULL = 9, P_SCRATCH = 10, P_DESC = 11 };

struct Param {
  int64_t kind;
  int64_t value;  // I32 / I64: the integer; F32: the bits of a double; DESC: the slot
};

// A 2-D host descriptor as triton's driver encodes it (fill_tma_descriptor): dims and box innermost
// first, the row stride in bytes; encoded per call on the address of A (slot 0) or B (slot 1).
struct Descriptor {
  int slot, dtype, swizzle, fill;
  uint64_t dims[2], stride_bytes;
  uint32_t box[2];
};

struct Launch {
  void* function;
  unsigned grid, threads, shared;
  int64_t scratch;
  std::vector<Param> params;
  std::vector<Descriptor> descriptors;
};

// The launch a record describes; nullptr for a malformed one (the key then keeps asking Python).
std::shared_ptr<const Launch> parse_launch(const std::vector<int64_t>& words);

// The output of the launch on these tensors (bias: nullptr for none): c = alpha * a @ b + beta * bias,
// a new (M, N) tensor of a's dtype; nullopt, nothing launched, where the tensors are not the ones the
// record holds for (another device current, an address not 16-byte aligned: triton specialised on it).
std::optional<at::Tensor> launch_native(const Launch& launch, const at::Tensor& a, const at::Tensor& b,
                                        const at::Tensor* bias, double alpha, double beta);

}  // namespace tritonblas_native
