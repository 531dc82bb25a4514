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

LaunchKernel launch_kernel() {
  static const LaunchKernel fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? reinterpret_cast<LaunchKernel>(dlsym(lib, "cuLaunchKernel")) : nullptr;
  }();
  return fn;
}

bool in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

uint64_t address(const at::Tensor& t) { return reinterpret_cast<uint64_t>(t.data_ptr()); }
}  // namespace

std::shared_ptr<const Launch> parse_launch(const std::vector<int64_t>& words) {
  if (words.size() < HEAD || words[0] != FORMAT || words[1] == 0) return nullptr;
  const int64_t count = words[6];
  if (count < 0 || static_cast<size_t>(count) > MAX_PARAMS || words.size() != HEAD + 2 * count) return nullptr;
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
    if (!in_range(p.kind, P_A, P_SCRATCH) || (p.kind == P_SCRATCH && launch->scratch == 0)) return nullptr;
    if (p.kind == P_I32 && !in_range(p.value, INT32_MIN, INT32_MAX)) return nullptr;
    launch->params.push_back(p);
  }
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
