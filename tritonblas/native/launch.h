// A routed call's kernels launched from C++ (route.cpp): the launch record the Python side made of a
// prepared launch (tritonblas/launch/native.py writes it), and its launch on a call's tensors.
//
// Why: a routed call whose kernel runs took the trip into Python, 55-73 us of host time a call inside a
// model's step against torch's own 21 (H200, 2026-12-02, commit 185762a), so transparent
// mode left every kernel that wins by less than that to torch in eager use. Here a key answered KERNEL
// launches the compiled kernels as triton's launcher does (cuLaunchKernel on the current stream, each
// kernel's non-constexpr arguments in order, then global and profile scratch), with no Python at all:
// pad copies of misaligned operands, the GEMM, Stream-K's reduce kernel, their buffers from torch's
// allocator.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace tritonblas_native {

// Record layout (int64 words): FORMAT, the count of buffers, the count of kernel launches; BUFFER_WORDS
// per buffer (bytes, zeroed); per launch LAUNCH_HEAD words (function handle, grid (programs), threads a
// program, dynamic shared memory bytes, global scratch bytes (0: none), the count of kernel parameters,
// the count of host descriptors (0 or 2)), a (kind, value) pair per parameter, DESC_WORDS per host
// descriptor. Kept in step with tritonblas/launch/native.py.
constexpr int64_t FORMAT = 2;
constexpr int64_t HEAD = 3;
constexpr int64_t BUFFER_WORDS = 2;
constexpr int64_t LAUNCH_HEAD = 7;
constexpr int64_t DESC_WORDS = 10;
constexpr size_t MAX_PARAMS = 96;
constexpr int64_t MAX_BUFFERS = 4;
constexpr int64_t MAX_LAUNCHES = 4;

// What a kernel parameter takes: the call's tensors' addresses, a constant, the call's alpha / beta, a
// host descriptor encoded for the call (value: its index, 0 for A's and 1 for B's), a buffer's address
// (value: its index).
enum Kind : int64_t { P_A = 0, P_B = 1, P_C = 2, P_BIAS = 3, P_I32 = 4, P_I64 = 5, P_F32 = 6,
                      P_ALPHA = 7, P_BETA = 8, P_NULL = 9, P_SCRATCH = 10, P_DESC = 11, P_BUF = 12 };

struct Param {
  int64_t kind;
  int64_t value;  // I32 / I64: the integer; F32: the bits of a double; DESC, BUF: the index
};

// A 2-D host descriptor as triton's driver encodes it (fill_tma_descriptor): dims and box innermost
// first, the row stride in bytes; encoded per call on its base's address (kind P_A, P_B or P_BUF).
struct Descriptor {
  int64_t base_kind, base_value;
  int dtype, swizzle, fill;
  uint64_t dims[2], stride_bytes;
  uint32_t box[2];
};

struct Kernel {
  void* function;
  unsigned grid, threads, shared;
  int64_t scratch;
  std::vector<Param> params;
  std::vector<Descriptor> descriptors;
};

// Device memory the launches share (zeroed when allocated: Stream-K's tile counters), kept per device and
// stream between calls (launch.cpp).
struct Buffer {
  int64_t bytes;
  bool zeroed;
};

// One call's buffers, kept for later calls of the record on the same device and stream (launch.cpp).
struct BufferSet {
  int64_t device, stream;
  std::array<at::Tensor, MAX_BUFFERS> tensors;
};

struct Launch {
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;  // launched in order on the call's stream
  // Buffer sets no call holds now (see launch.cpp: why they are kept, and how a call owns one).
  mutable std::mutex pool_mutex;
  mutable std::vector<BufferSet> pool;
  mutable int64_t kept_bytes = 0;
  ~Launch();
};

// The launch a record describes; nullptr for a malformed one (the key then keeps asking Python).
std::shared_ptr<const Launch> parse_launch(const std::vector<int64_t>& words);

// The output of the launch on these tensors (bias: nullptr for none): c = alpha * a @ b + beta * bias,
// a new (M, N) tensor of a's dtype; nullopt, nothing launched, where the tensors are not the ones the
// record holds for (another device current, an address not 16-byte aligned: triton specialised on it).
std::optional<at::Tensor> launch_native(const Launch& launch, const at::Tensor& a, const at::Tensor& b,
                                        const at::Tensor* bias, double alpha, double beta);

}  // namespace tritonblas_native
