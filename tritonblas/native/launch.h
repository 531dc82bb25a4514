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

#include "contract.h"
#include "stream.h"

namespace tritonblas_native {

// The record's layout, its caps and each parameter's Kind: contract.h (tritonblas/contract.py).

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

// A scaled_mm call's scales (contiguous fp32: the record was written for a key whose scales are) and
// output dtype (none: a's); a plain GEMM's are all absent.
struct Scales {
  const at::Tensor* a = nullptr;
  const at::Tensor* b = nullptr;
  std::optional<at::ScalarType> out_dtype;
};

// The output of the launch on these tensors (bias: nullptr for none): c = alpha * a @ b * scales + beta *
// bias, a new (M, N) tensor of a's dtype or the scales' out_dtype; nullopt, nothing launched, where the
// tensors are not the ones the record holds for (another device current, an address not 16-byte
// aligned: triton specialised on it).
std::optional<at::Tensor> launch_native(const Launch& launch, const at::Tensor& a, const at::Tensor& b,
                                        const at::Tensor* bias, double alpha, double beta,
                                        const Scales& scales = {});

// The words of a parsed launch, as the record that made it (tests: parse_launch reads each field).
std::vector<int64_t> record_words(const Launch& launch);

// Tests of the buffer pool on the CPU: `steps` are (what, value) pairs: (0, stream) a call takes its
// set on `stream`, (2, stream) the same under graph capture, (1, i) the i-th call taken gives its set
// back. Per call taken: its first buffer's address, whether the set goes back to the pool, whether its
// zeroed buffers are zero.
std::vector<int64_t> pool_probe(const std::vector<int64_t>& record, const std::vector<int64_t>& steps);

}  // namespace tritonblas_native
