// A routed call's kernel launched from C++ (launch.h says why and what a record holds).
#include "launch.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

#include <array>
#include <cstring>

namespace tritonblas_native {

namespace {
// cuLaunchKernel, asked of the driver without CUDA's headers (libcuda is loaded wherever a CUDA tensor
// exists; triton's own launcher opens it the same way).
using LaunchKernel = int (*)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, void* stream, void** params, void** extra);

// cuTensorMapEncodeTiled, the same way; its enums as triton's driver passes them.
using EncodeTiled = int (*)(void* map, int dtype, unsigned rank, void* address, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box, const uint32_t* element_strides,
                            int interleave, int swizzle, int l2_promotion, int fill);
constexpr int INTERLEAVE_NONE = 0;
constexpr int L2_PROMOTION_128B = 2;

// CUtensorMap: 128 opaque bytes (aligned as triton's launcher keeps it).
struct alignas(128) TensorMap {
  uint64_t words[16];
};

template <typename Fn>
Fn driver(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

LaunchKernel launch_kernel() {
  static const LaunchKernel fn = driver<LaunchKernel>("cuLaunchKernel");
  return fn;
}

EncodeTiled encode_tiled() {
  static const EncodeTiled fn = driver<EncodeTiled>("cuTensorMapEncodeTiled");
  return fn;
}

void encode(TensorMap& map, const Descriptor& d, uint64_t address) {
  const EncodeTiled fn = encode_tiled();
  TORCH_CHECK(fn != nullptr, "tritonblas: the CUDA driver has no cuTensorMapEncodeTiled");
  const uint64_t strides[2] = {d.stride_bytes, d.dims[1] * d.stride_bytes};
  const uint32_t element_strides[2] = {1, 1};
  const int status = fn(&map, d.dtype, 2, reinterpret_cast<void*>(address), d.dims, strides, d.box,
                        element_strides, INTERLEAVE_NONE, d.swizzle, L2_PROMOTION_128B, d.fill);
  TORCH_CHECK(status == 0, "tritonblas: cuTensorMapEncodeTiled of a routed call's descriptor failed (CUDA "
              "error ", status, ")");
}

bool in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

uint64_t address(const at::Tensor& t) { return reinterpret_cast<uint64_t>(t.data_ptr()); }

bool parse_descriptors(const std::vector<int64_t>& words, size_t at, int64_t count, Launch& launch) {
  for (int64_t i = 0; i < count; ++i, at += DESC_WORDS) {
    const int64_t* w = words.data() + at;
    if (w[0] != i || !in_range(w[1], 0, 15) || !in_range(w[2], 0, 4) || !in_range(w[3], 0, 1)) return false;
    for (int j : {4, 5, 6}) {
      if (w[j] <= 0) return false;
    }
    if (!in_range(w[7], 1, 256) || !in_range(w[8], 1, 256)) return false;
    Descriptor d{static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), static_cast<int>(w[3]),
                 {static_cast<uint64_t>(w[4]), static_cast<uint64_t>(w[5])}, static_cast<uint64_t>(w[6]),
                 {static_cast<uint32_t>(w[7]), static_cast<uint32_t>(w[8])}};
    launch.descriptors.push_back(d);
  }
  return true;
}
}  // namespace

std::shared_ptr<const Launch> parse_launch(const std::vector<int64_t>& words) {
  if (words.size() < HEAD || words[0] != FORMAT || words[1] == 0) return nullptr;
  const int64_t count = words[6], descs = words[7];
  if (count < 0 || static_cast<size_t>(count) > MAX_PARAMS || (descs != 0 && descs != 2) ||
      words.size() != static_cast<size_t>(HEAD + 2 * count + DESC_WORDS * descs))
    return nullptr;
  if (!in_range(words[2], 1, 0x7fffffff) || !in_range(words[3], 1, 1024) || !in_range(words[4], 0, 1 << 30) ||
      words[5] < 0)
    return nullptr;
  auto launch = std::make_shared<Launch>();
  launch->function = reinterpret_cast<void*>(words[1]);
  launch->grid = static_cast<unsigned>(words[2]);
  launch->threads = static_cast<unsigned>(words[3]);
  launch->shared = static_cast<unsigned>(words[4]);
  launch->scratch = words[5];
  for (int64_t i = 0; i < count; ++i) {
    const Param p{words[HEAD + 2 * i], words[HEAD + 2 * i + 1]};
    if (!in_range(p.kind, P_A, P_DESC) || (p.kind == P_SCRATCH && launch->scratch == 0)) return nullptr;
    if (p.kind == P_I32 && !in_range(p.value, INT32_MIN, INT32_MAX)) return nullptr;
    if (p.kind == P_DESC && !in_range(p.value, 0, descs - 1)) return nullptr;
    launch->params.push_back(p);
  }
  if (!parse_descriptors(words, HEAD + 2 * count, descs, *launch)) return nullptr;
  return launch;
}

std::optional<at::Tensor> launch_native(const Launch& launch, const at::Tensor& a, const at::Tensor& b,
                                        const at::Tensor* bias, double alpha, double beta) {
  const LaunchKernel launch_fn = launch_kernel();
  if (launch_fn == nullptr || !a.is_cuda()) return std::nullopt;
  const auto* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  // The key holds every tensor's device: a, b and the bias are on a's, which must be the current one
  // (the stream and the loaded module are the current device's), as launch.prepared requires.
  if (cuda->getDevice().index() != a.device().index()) return std::nullopt;
  const uint64_t pa = address(a), pb = address(b), pbias = bias ? address(*bias) : 0;
  if ((pa | pb | pbias) & 15) return std::nullopt;
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
  at::Tensor scratch;
  if (launch.scratch) scratch = at::empty({launch.scratch}, a.options().dtype(at::kByte));
  const uint64_t pc = address(out);
  TensorMap maps[2];
  for (const Descriptor& d : launch.descriptors) encode(maps[d.slot], d, d.slot == 0 ? pa : pb);
  std::array<uint64_t, MAX_PARAMS> slots;
  std::array<void*, MAX_PARAMS> params;
  const size_t count = launch.params.size();
  for (size_t i = 0; i < count; ++i) {
    const Param& p = launch.params[i];
    uint64_t& slot = slots[i];
    slot = 0;
    switch (p.kind) {
      case P_A: slot = pa; break;
      case P_B: slot = pb; break;
      case P_C: slot = pc; break;
      case P_BIAS: slot = bias ? pbias : pc; break;
      case P_I64: slot = static_cast<uint64_t>(p.value); break;
      case P_SCRATCH: slot = address(scratch); break;
      case P_NULL: break;
      case P_DESC: params[i] = &maps[p.value]; continue;
      case P_I32: {
        const int32_t v = static_cast<int32_t>(p.value);
        std::memcpy(&slot, &v, sizeof v);
        break;
      }
      default: {  // fp32: a constant, alpha or beta (triton passes floats as fp32)
        double d = alpha;
        if (p.kind == P_BETA) d = beta;
        if (p.kind == P_F32) std::memcpy(&d, &p.value, sizeof d);
        const float f = static_cast<float>(d);
        std::memcpy(&slot, &f, sizeof f);
      }
    }
    params[i] = &slot;
  }
  const c10::Stream stream = cuda->getStream(a.device());
  const int status = launch_fn(launch.function, launch.grid, 1, 1, launch.threads, 1, 1, launch.shared,
                               reinterpret_cast<void*>(stream.native_handle()), params.data(), nullptr);
  TORCH_CHECK(status == 0, "tritonblas: cuLaunchKernel of a routed call's kernel failed (CUDA error ", status,
              ")");
  return out;
}

}  // namespace tritonblas_native
