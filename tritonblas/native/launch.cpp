// A routed call's kernel launched from C++ (launch.h says why and what a record holds).
#include "launch.h"

#include "answers.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
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

// cuMemsetD8Async, the same way: Stream-K's tile counters zeroed on the call's stream.
using MemsetAsync = int (*)(uint64_t address, unsigned char value, size_t count, void* stream);

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

MemsetAsync memset_async() {
  static const MemsetAsync fn = driver<MemsetAsync>("cuMemsetD8Async");
  return fn;
}

EncodeTiled encode_tiled() {
  static const EncodeTiled fn = driver<EncodeTiled>("cuTensorMapEncodeTiled");
  return fn;
}

void encode(TensorMap& map, const Descriptor& d, uint64_t base) {
  const EncodeTiled fn = encode_tiled();
  TORCH_CHECK(fn != nullptr, "tritonblas: the CUDA driver has no cuTensorMapEncodeTiled");
  const uint64_t strides[2] = {d.stride_bytes, d.dims[1] * d.stride_bytes};
  const uint32_t element_strides[2] = {1, 1};
  const int status = fn(&map, d.dtype, 2, reinterpret_cast<void*>(base), d.dims, strides, d.box,
                        element_strides, INTERLEAVE_NONE, d.swizzle, L2_PROMOTION_128B, d.fill);
  TORCH_CHECK(status == 0, "tritonblas: cuTensorMapEncodeTiled of a routed call's descriptor failed (CUDA "
              "error ", status, ")");
}

bool in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

uint64_t address(const at::Tensor& t) { return reinterpret_cast<uint64_t>(t.data_ptr()); }

// Reads a record word by word; `ok` turns false on a read past its end.
struct Reader {
  const std::vector<int64_t>& words;
  size_t at = 0;
  bool ok = true;
  int64_t next() {
    if (at >= words.size()) {
      ok = false;
      return 0;
    }
    return words[at++];
  }
};

bool base_ok(int64_t kind, int64_t value, size_t buffers) {
  return kind == P_A || kind == P_B || (kind == P_BUF && in_range(value, 0, static_cast<int64_t>(buffers) - 1));
}

bool parse_descriptors(Reader& r, int64_t count, size_t buffers, Kernel& kernel) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t w[DESC_WORDS];
    for (int64_t& v : w) v = r.next();
    if (!r.ok || !base_ok(w[0], w[1], buffers) || !in_range(w[2], 0, 15) || !in_range(w[3], 0, 4) ||
        !in_range(w[4], 0, 1))
      return false;
    for (int j : {5, 6, 7}) {
      if (w[j] <= 0) return false;
    }
    if (!in_range(w[8], 1, 256) || !in_range(w[9], 1, 256)) return false;
    kernel.descriptors.push_back(Descriptor{w[0], w[1], static_cast<int>(w[2]), static_cast<int>(w[3]),
                                            static_cast<int>(w[4]),
                                            {static_cast<uint64_t>(w[5]), static_cast<uint64_t>(w[6])},
                                            static_cast<uint64_t>(w[7]),
                                            {static_cast<uint32_t>(w[8]), static_cast<uint32_t>(w[9])}});
  }
  return true;
}

bool parse_kernel(Reader& r, size_t buffers, Kernel& kernel) {
  int64_t head[LAUNCH_HEAD];
  for (int64_t& v : head) v = r.next();
  const int64_t count = head[5], descs = head[6];
  if (!r.ok || head[0] == 0 || !in_range(head[1], 1, 0x7fffffff) || !in_range(head[2], 1, 1024) ||
      !in_range(head[3], 0, 1 << 30) || head[4] < 0 || count < 0 || static_cast<size_t>(count) > MAX_PARAMS ||
      (descs != 0 && descs != 2))
    return false;
  kernel.function = reinterpret_cast<void*>(head[0]);
  kernel.grid = static_cast<unsigned>(head[1]);
  kernel.threads = static_cast<unsigned>(head[2]);
  kernel.shared = static_cast<unsigned>(head[3]);
  kernel.scratch = head[4];
  for (int64_t i = 0; i < count; ++i) {
    const Param p{r.next(), r.next()};
    if (!r.ok || !in_range(p.kind, P_A, P_SCALE_B) || (p.kind == P_SCRATCH && kernel.scratch == 0)) return false;
    if (p.kind == P_I32 && !in_range(p.value, INT32_MIN, INT32_MAX)) return false;
    if (p.kind == P_DESC && !in_range(p.value, 0, descs - 1)) return false;
    if (p.kind == P_BUF && !in_range(p.value, 0, static_cast<int64_t>(buffers) - 1)) return false;
    kernel.params.push_back(p);
  }
  return parse_descriptors(r, descs, buffers, kernel);
}

// The call's addresses: its operands, output, bias (or the output's), scales (0: none) and buffers.
struct Addresses {
  uint64_t a, b, c, bias, scale_a, scale_b;
  std::array<uint64_t, MAX_BUFFERS> buffers;
  uint64_t of(int64_t kind, int64_t value) const {
    switch (kind) {
      case P_A: return a;
      case P_B: return b;
      case P_C: return c;
      case P_BIAS: return bias;
      case P_SCALE_A: return scale_a;
      case P_SCALE_B: return scale_b;
      default: return buffers[value];  // P_BUF (parse_launch checked the index)
    }
  }
};

void launch_kernel_on(const Kernel& kernel, const Addresses& addr, double alpha, double beta,
                      const at::TensorOptions& bytes, void* stream) {
  at::Tensor scratch;
  if (kernel.scratch) scratch = at::empty({kernel.scratch}, bytes);
  TensorMap maps[2];
  for (size_t i = 0; i < kernel.descriptors.size(); ++i) {
    const Descriptor& d = kernel.descriptors[i];
    encode(maps[i], d, addr.of(d.base_kind, d.base_value));
  }
  std::array<uint64_t, MAX_PARAMS> slots;
  std::array<void*, MAX_PARAMS> params;
  const size_t count = kernel.params.size();
  for (size_t i = 0; i < count; ++i) {
    const Param& p = kernel.params[i];
    uint64_t& slot = slots[i];
    slot = 0;
    switch (p.kind) {
      case P_A:
      case P_B:
      case P_C:
      case P_BIAS:
      case P_SCALE_A:
      case P_SCALE_B:
      case P_BUF: slot = addr.of(p.kind, p.value); break;
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
  const int status = launch_kernel()(kernel.function, kernel.grid, 1, 1, kernel.threads, 1, 1, kernel.shared,
                                     stream, params.data(), nullptr);
  TORCH_CHECK(status == 0, "tritonblas: cuLaunchKernel of a routed call's kernel failed (CUDA error ", status,
              ")");
}

// Buffers are kept between calls, as the Python side's scratch pool keeps them (launch/scratch.py): a
// buffer allocated per call and freed once its launches were enqueued goes back to torch's allocator,
// which may split its block for the step's other tensors, so that the next call's buffer of 60-100 MB
// (a padded vocabulary) takes a fresh cudaMalloc. A call owns a set from take() until every launch is
// enqueued, then gives it back: a later call on the same stream that takes it runs after those launches,
// and sets are never shared across streams. A launch that throws drops its set (counters may be left
// set part way). Under graph capture a call allocates its own (the graph's pool), zeroed in the graph.
// Tile counters are zeroed once, when allocated: every Stream-K launch leaves them at zero.
// All records' kept sets hold at most POOL_CAP_BYTES (contract.h); past it, a call allocates its own.
std::atomic<int64_t> kept_total{0};

std::optional<BufferSet> take(const Launch& launch, int64_t device, int64_t stream) {
  std::lock_guard<std::mutex> lock(launch.pool_mutex);
  for (auto it = launch.pool.begin(); it != launch.pool.end(); ++it) {
    if (it->device == device && it->stream == stream) {
      BufferSet set = std::move(*it);
      launch.pool.erase(it);
      return set;
    }
  }
  return std::nullopt;
}

void give(const Launch& launch, BufferSet&& set) {
  std::lock_guard<std::mutex> lock(launch.pool_mutex);
  launch.pool.push_back(std::move(set));
}

// A new set for a call: allocated, its counters zeroed on `stream`; whether it may be kept (the cap).
bool allocate(const Launch& launch, BufferSet& set, const at::TensorOptions& bytes, void* stream,
              bool keep) {
  int64_t total = 0;
  for (size_t i = 0; i < launch.buffers.size(); ++i) {
    const Buffer& buffer = launch.buffers[i];
    set.tensors[i] = at::empty({buffer.bytes}, bytes);
    total += buffer.bytes;
    if (buffer.zeroed && !set.tensors[i].is_cuda()) {
      set.tensors[i].zero_();  // (the CPU: pool_probe's, tests only)
    } else if (buffer.zeroed) {
      const MemsetAsync memset_fn = memset_async();
      TORCH_CHECK(memset_fn != nullptr, "tritonblas: the CUDA driver has no cuMemsetD8Async");
      const int status = memset_fn(address(set.tensors[i]), 0, static_cast<size_t>(buffer.bytes), stream);
      TORCH_CHECK(status == 0, "tritonblas: cuMemsetD8Async of a routed call's counters failed (CUDA error ",
                  status, ")");
    }
  }
  if (!keep || kept_total.fetch_add(total) + total > POOL_CAP_BYTES) {
    if (keep) kept_total.fetch_sub(total);
    return false;
  }
  std::lock_guard<std::mutex> lock(launch.pool_mutex);
  launch.kept_bytes += total;
  return true;
}

// A call's buffer set on its device and stream: a kept one, else a new one (`pooled`: not under graph
// capture); whether it goes back to the pool once the call's launches are enqueued.
bool buffers_for(const Launch& launch, BufferSet& set, const at::TensorOptions& bytes, void* stream,
                 bool pooled) {
  std::optional<BufferSet> kept = pooled ? take(launch, set.device, set.stream) : std::nullopt;
  if (!kept) return allocate(launch, set, bytes, stream, pooled);
  set = std::move(*kept);
  return true;
}
}  // namespace

Launch::~Launch() { kept_total.fetch_sub(kept_bytes); }

std::shared_ptr<const Launch> parse_launch(const std::vector<int64_t>& words) {
  Reader r{words};
  const int64_t format = r.next(), buffers = r.next(), kernels = r.next();
  if (!r.ok || format != FORMAT || !in_range(buffers, 0, MAX_BUFFERS) || !in_range(kernels, 1, MAX_LAUNCHES))
    return nullptr;
  auto launch = std::make_shared<Launch>();
  for (int64_t i = 0; i < buffers; ++i) {
    const int64_t bytes = r.next(), zeroed = r.next();
    if (!r.ok || bytes <= 0 || !in_range(zeroed, 0, 1)) return nullptr;
    launch->buffers.push_back(Buffer{bytes, zeroed == 1});
  }
  for (int64_t i = 0; i < kernels; ++i) {
    Kernel kernel;
    if (!parse_kernel(r, launch->buffers.size(), kernel)) return nullptr;
    launch->kernels.push_back(std::move(kernel));
  }
  if (r.at != words.size()) return nullptr;
  return launch;
}

std::optional<at::Tensor> launch_native(const Launch& launch, const at::Tensor& a, const at::Tensor& b,
                                        const at::Tensor* bias, double alpha, double beta, const Scales& scales) {
  if (launch_kernel() == nullptr || !a.is_cuda()) return std::nullopt;
  const auto* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  // The key holds every tensor's device: a, b and the bias are on a's, which must be the current one
  // (the stream and the loaded module are the current device's), as launch.prepared requires.
  if (cuda->getDevice().index() != a.device().index()) return std::nullopt;
  const c10::Stream stream = cuda->getStream(a.device());
  const std::optional<void*> handle = stream_handle(stream);
  if (!handle) return std::nullopt;  // a torch that does not give it (2.10): launched from Python
  Addresses addr{address(a), address(b), 0, bias ? address(*bias) : 0,
                 scales.a ? address(*scales.a) : 0, scales.b ? address(*scales.b) : 0, {}};
  if ((addr.a | addr.b | addr.bias | addr.scale_a | addr.scale_b) & 15) return std::nullopt;
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(scales.out_dtype.value_or(a.scalar_type())));
  addr.c = address(out);
  if (!bias) addr.bias = addr.c;
  void* raw = *handle;
  const at::TensorOptions bytes = a.options().dtype(at::kByte);
  BufferSet set{a.device().index(), stream.id(), {}};
  bool keep = false;
  if (!launch.buffers.empty()) {
    keep = buffers_for(launch, set, bytes, raw, !capturing(a));
    for (size_t i = 0; i < launch.buffers.size(); ++i) addr.buffers[i] = address(set.tensors[i]);
  }
  for (const Kernel& kernel : launch.kernels) launch_kernel_on(kernel, addr, alpha, beta, bytes, raw);
  if (keep) give(launch, std::move(set));  // every launch is enqueued: the next taker runs after them
  return out;
}

std::vector<int64_t> record_words(const Launch& launch) {
  std::vector<int64_t> words{FORMAT, static_cast<int64_t>(launch.buffers.size()),
                             static_cast<int64_t>(launch.kernels.size())};
  for (const Buffer& b : launch.buffers) words.insert(words.end(), {b.bytes, b.zeroed ? 1 : 0});
  for (const Kernel& k : launch.kernels) {
    words.insert(words.end(), {static_cast<int64_t>(reinterpret_cast<uintptr_t>(k.function)), k.grid, k.threads,
                               k.shared, k.scratch, static_cast<int64_t>(k.params.size()),
                               static_cast<int64_t>(k.descriptors.size())});
    for (const Param& p : k.params) words.insert(words.end(), {p.kind, p.value});
    for (const Descriptor& d : k.descriptors) {
      words.insert(words.end(), {d.base_kind, d.base_value, d.dtype, d.swizzle, d.fill,
                                 static_cast<int64_t>(d.dims[0]), static_cast<int64_t>(d.dims[1]),
                                 static_cast<int64_t>(d.stride_bytes), d.box[0], d.box[1]});
    }
  }
  return words;
}

std::vector<int64_t> pool_probe(const std::vector<int64_t>& record, const std::vector<int64_t>& steps) {
  const std::shared_ptr<const Launch> launch = parse_launch(record);
  TORCH_CHECK(launch && !launch->buffers.empty(), "pool_probe: a well-formed record with buffers");
  TORCH_CHECK(steps.size() % 2 == 0, "pool_probe: steps are (what, value) pairs");
  const at::TensorOptions bytes = at::TensorOptions().dtype(at::kByte);
  std::vector<std::optional<BufferSet>> held;
  std::vector<bool> kept;
  std::vector<int64_t> out;
  for (size_t i = 0; i < steps.size(); i += 2) {
    const int64_t what = steps[i], value = steps[i + 1];
    if (what == 0 || what == 2) {  // a call on stream `value` (2: under capture) takes its set
      BufferSet set{-1, value, {}};
      kept.push_back(buffers_for(*launch, set, bytes, nullptr, what == 0));
      bool zero = true;
      for (size_t b = 0; b < launch->buffers.size(); ++b) {
        if (launch->buffers[b].zeroed) zero = zero && !set.tensors[b].any().item<bool>();
      }
      out.insert(out.end(), {static_cast<int64_t>(address(set.tensors[0])), kept.back() ? 1 : 0, zero ? 1 : 0});
      held.emplace_back(std::move(set));
    } else {  // 1: the call that took set `value` gives it back (if it may be kept)
      TORCH_CHECK(what == 1 && in_range(value, 0, static_cast<int64_t>(held.size()) - 1) && held[value],
                  "pool_probe: step (1, i) gives back the i-th set taken, once");
      if (kept[value]) give(*launch, std::move(*held[value]));
      held[value].reset();
    }
  }
  return out;
}

}  // namespace tritonblas_native
