// Transparent mode's aten::mm, aten::addmm, aten::_scaled_mm and aten::_grouped_mm kernels, in C++
// (tritonblas/native/__init__.py builds and loads this file; tritonblas/transparent.py installs it).
//
// Why C++: a Python kernel under the dispatcher costs 3-4 us a call before it does anything, and most
// GEMMs of a model are calls dispatch gives to torch's own kernel. Here a call whose key (op, shapes,
// strides, dtypes, devices) was answered "torch" before runs torch's kernel directly (at::cuda::mm, no
// second trip through the dispatcher); every other call goes to the Python side through the op
// tritonblas_native::routed_mm / routed_addmm / routed_scaled_mm / routed_grouped_mm, which plans it and
// returns its output (or none: torch's kernel runs); what holds for later calls of the key it says
// through the op `answer` (no call: ASK, ask again): TORCH (torch's kernel for good) or EAGER_TORCH
// (torch's kernel unless the stream is being captured into a CUDA graph, where the kernels win), or
// KERNEL with a launch record (launch.h: the kernel launched from here, no Python). Said apart because
// an output alone comes back through the dispatcher at half the cost of a tuple, and most calls that
// reach Python answer ASK (docs/notes/kernel-levers.md, R8). The answers are dropped by forget() only
// (the Python side calls it whenever dispatch's selections or the recording file change): they outlive
// uninstall(), so a `with tritonblas.enable():` around every forward does not send each GEMM of each
// forward through Python again. The answers are shared with the explicit ops' front (front.cpp), each op
// under its own code (answers.h).
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_grouped_mm_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/_scaled_mm_cpu_dispatch.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#ifdef TRITONBLAS_CUDA
#include <ATen/ops/_grouped_mm_cuda_dispatch.h>
#include <ATen/ops/_scaled_mm_cuda_dispatch.h>
#include <ATen/ops/addmm_cuda_dispatch.h>
#include <ATen/ops/mm_cuda_dispatch.h>
#endif

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

#include <array>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "answers.h"
#include "launch.h"

namespace tritonblas_native {

namespace {
struct KeyHash {
  size_t operator()(const Key& key) const noexcept {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a over the words
    for (int64_t v : key) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ULL;
    }
    return static_cast<size_t>(h);
  }
};

struct Entry {
  int64_t answer;
  std::shared_ptr<const Launch> launch;  // KERNEL's
};

std::mutex mutex;
std::unordered_map<Key, Entry, KeyHash> answers;  // TORCH, EAGER_TORCH or KERNEL, by key
std::unique_ptr<torch::Library> installed;          // the aten registrations while transparent mode is on

// What the Python side of this thread's routed call answered through `answer` (the call runs on the
// caller's thread): reset before each call into Python, read after it.
struct Said {
  int64_t answer = ASK;
  std::vector<int64_t> record;
};
thread_local Said said;
}  // namespace

int64_t known(const Key& key) {
  std::lock_guard<std::mutex> guard(mutex);
  auto it = answers.find(key);
  return it == answers.end() ? ASK : it->second.answer;
}

void remember(const Key& key, int64_t answer) {
  if (answer != TORCH && answer != EAGER_TORCH) return;
  std::lock_guard<std::mutex> guard(mutex);
  if (answers.size() >= CACHE_CAP) answers.clear();
  answers[key] = Entry{answer, nullptr};
}

// A routed call's answer and KERNEL's launch, in one lookup (ASK where `keyed` is false).
Entry find(bool keyed, const Key& key) {
  if (!keyed) return Entry{ASK, nullptr};
  std::lock_guard<std::mutex> guard(mutex);
  auto it = answers.find(key);
  return it == answers.end() ? Entry{ASK, nullptr} : it->second;
}

// A routed call's answer: KERNEL keeps the launch its record describes (a malformed one: asked again).
void remember_routed(const Key& key, int64_t answer, const std::vector<int64_t>& record) {
  if (answer != KERNEL) {
    remember(key, answer);
    return;
  }
  std::shared_ptr<const Launch> launch = parse_launch(record);
  if (!launch) return;
  std::lock_guard<std::mutex> guard(mutex);
  if (answers.size() >= CACHE_CAP) answers.clear();
  answers[key] = Entry{KERNEL, std::move(launch)};
}

// Asked of the driver (cuStreamIsCapturing: libcuda is loaded wherever a CUDA tensor exists) without
// CUDA's headers.
bool capturing(const at::Tensor& t) {
  if (!t.is_cuda()) return false;
  using IsCapturing = int (*)(void*, int*);
  static const IsCapturing is_capturing = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? reinterpret_cast<IsCapturing>(dlsym(lib, "cuStreamIsCapturing")) : nullptr;
  }();
  if (is_capturing == nullptr) return true;  // unknown: the Python side decides
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device());
  const std::optional<void*> raw = stream_handle(stream);
  if (!raw) return true;  // a torch that does not give the handle (2.10): the Python side decides
  int status = 0;
  return is_capturing(*raw, &status) != 0 || status != 0;
}

}  // namespace tritonblas_native

namespace {
using namespace tritonblas_native;

bool number(const c10::Scalar& s) { return s.isFloatingPoint() || s.isIntegral(/*includeBool=*/false); }

using Optional = std::optional<at::Tensor>;

// The Python side's output of a routed call (none: torch's kernel runs), its answer for later calls of
// the key kept (where `keyed`; a key answered KERNEL comes to Python only for a call its launch declined:
// an address not 16-byte aligned, another device current, and its launch stays, with its kept buffers).
template <typename Call>
Optional ask(bool keyed, const Key& key, const Entry& entry, Call call) {
  said = Said{};
  Optional out = call();
  if (keyed && !entry.launch) remember_routed(key, said.answer, said.record);
  return out;
}

void say(int64_t answer, std::vector<int64_t> record) { said = Said{answer, std::move(record)}; }


template <c10::DispatchKey K>
at::Tensor own_mm(const at::Tensor& a, const at::Tensor& b) {
#ifdef TRITONBLAS_CUDA
  if constexpr (K == c10::DispatchKey::CUDA) return at::cuda::mm(a, b);
#endif
  return at::cpu::mm(a, b);
}

template <c10::DispatchKey K>
at::Tensor own_addmm(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b,
                     const c10::Scalar& beta, const c10::Scalar& alpha) {
#ifdef TRITONBLAS_CUDA
  if constexpr (K == c10::DispatchKey::CUDA) return at::cuda::addmm(bias, a, b, beta, alpha);
#endif
  return at::cpu::addmm(bias, a, b, beta, alpha);
}

template <c10::DispatchKey K>
at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  Key key{};
  key[0] = ROUTED_MM;
  const bool keyed = put(key, 0, a) && put(key, 1, b);
  const Entry entry = find(keyed, key);
  if (torch_answer(entry.answer, a)) return own_mm<K>(a, b);
  if (entry.launch) {
    if (auto out = launch_native(*entry.launch, a, b, nullptr, 1.0, 0.0)) return *out;
  }
  static auto routed = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("tritonblas_native::routed_mm", "")
                           .typed<Optional(const at::Tensor&, const at::Tensor&)>();
  Optional out = ask(keyed, key, entry, [&] { return routed.redispatch(c10::DispatchKeySet(K), a, b); });
  return out ? *out : own_mm<K>(a, b);
}

template <c10::DispatchKey K>
at::Tensor addmm(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  Key key{};
  const bool numbers = number(beta) && number(alpha);
  key[0] = numbers && beta.toDouble() == 0.0 ? ROUTED_ADDMM0 : ROUTED_ADDMM;  // beta == 0: another plan
  const bool keyed = numbers && put(key, 0, a) && put(key, 1, b) && put(key, 2, bias);
  const Entry entry = find(keyed, key);
  if (torch_answer(entry.answer, a)) return own_addmm<K>(bias, a, b, beta, alpha);
  if (entry.launch) {  // (keyed: alpha and beta are numbers)
    if (auto out = launch_native(*entry.launch, a, b, &bias, alpha.toDouble(), beta.toDouble())) return *out;
  }
  static auto routed =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("tritonblas_native::routed_addmm", "")
          .typed<Optional(const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::Scalar&,
                          const c10::Scalar&)>();
  Optional out = ask(keyed, key, entry,
                     [&] { return routed.redispatch(c10::DispatchKeySet(K), bias, a, b, beta, alpha); });
  return out ? *out : own_addmm<K>(bias, a, b, beta, alpha);
}

template <c10::DispatchKey K>
at::Tensor own_scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, const Optional& bias, const Optional& scale_result,
                         std::optional<at::ScalarType> out_dtype, bool fast_accum) {
#ifdef TRITONBLAS_CUDA
  if constexpr (K == c10::DispatchKey::CUDA) {
    return at::cuda::_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, fast_accum);
  }
#endif
  return at::cpu::_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, fast_accum);
}

// aten::_scaled_mm: keyed as the explicit scaled_mm (answers.h's put_scales), no out= (slot 3). A call
// with a scale of the result is never keyed (torch's alone: the Python side says so per call). KERNEL's
// launch record takes the call's scales (tensor- or row-wise; block-wise ones are Python's).
template <c10::DispatchKey K>
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                     const Optional& bias, const Optional& scale_result, std::optional<at::ScalarType> out_dtype,
                     bool fast_accum) {
  Key key{};
  key[0] = ROUTED_SCALED_MM;
  absent(key, 3);
  if (!bias) absent(key, 2);
  const int64_t dtype = out_dtype ? static_cast<int64_t>(*out_dtype) : -1;
  const bool keyed = !scale_result && put(key, 0, a) && put(key, 1, b) && (!bias || put(key, 2, *bias)) &&
                     put_scales(key, dtype, fast_accum, scale_a, scale_b);
  const Entry entry = find(keyed, key);
  if (torch_answer(entry.answer, a)) {
    return own_scaled_mm<K>(a, b, scale_a, scale_b, bias, scale_result, out_dtype, fast_accum);
  }
  if (entry.launch) {  // (keyed: no scale of the result)
    const Scales scales{&scale_a, &scale_b, out_dtype};
    if (auto out = launch_native(*entry.launch, a, b, bias ? &*bias : nullptr, 1.0, 1.0, scales)) return *out;
  }
  static auto routed = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("tritonblas_native::routed_scaled_mm", "")
                           .typed<Optional(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const at::Tensor&, const Optional&, const Optional&,
                                           std::optional<at::ScalarType>, bool)>();
  Optional out = ask(keyed, key, entry, [&] {
    return routed.redispatch(c10::DispatchKeySet(K), a, b, scale_a, scale_b, bias, scale_result, out_dtype,
                             fast_accum);
  });
  return out ? *out : own_scaled_mm<K>(a, b, scale_a, scale_b, bias, scale_result, out_dtype, fast_accum);
}

template <c10::DispatchKey K>
at::Tensor own_grouped_mm(const at::Tensor& a, const at::Tensor& b, const Optional& offs, const Optional& bias,
                          std::optional<at::ScalarType> out_dtype) {
#ifdef TRITONBLAS_CUDA
  if constexpr (K == c10::DispatchKey::CUDA) return at::cuda::_grouped_mm(a, b, offs, bias, out_dtype);
#endif
  return at::compositeexplicitautograd::_grouped_mm(a, b, offs, bias, out_dtype);  // (the CPU's)
}

// aten::_grouped_mm (torch._grouped_mm, F.grouped_mm, transformers' grouped_mm experts): keyed by a and b
// (3-D at most) and offs in slots 0-2, the output dtype as given in key[1]. A call with a bias is torch's
// (its error where its kernel takes none: what the Python side answers too).
template <c10::DispatchKey K>
at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b, const Optional& offs, const Optional& bias,
                      std::optional<at::ScalarType> out_dtype) {
  if (bias) return own_grouped_mm<K>(a, b, offs, bias, out_dtype);
  Key key{};
  key[0] = ROUTED_GROUPED_MM;
  key[1] = out_dtype ? static_cast<int64_t>(*out_dtype) : -1;
  if (!offs) absent(key, 2);
  const bool keyed = put(key, 0, a, 3) && put(key, 1, b, 3) && (!offs || put(key, 2, *offs, 1));
  const Entry entry = find(keyed, key);
  if (torch_answer(entry.answer, a)) return own_grouped_mm<K>(a, b, offs, bias, out_dtype);
  static auto routed = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("tritonblas_native::routed_grouped_mm", "")
                           .typed<Optional(const at::Tensor&, const at::Tensor&, const Optional&,
                                           std::optional<at::ScalarType>)>();
  Optional out =
      ask(keyed, key, entry, [&] { return routed.redispatch(c10::DispatchKeySet(K), a, b, offs, out_dtype); });
  return out ? *out : own_grouped_mm<K>(a, b, offs, bias, out_dtype);
}

// torch warns that aten's own kernels are overridden: that is the point.
struct Quiet : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

void install(bool cpu) {
  std::lock_guard<std::mutex> guard(mutex);
  if (installed) return;
  Quiet quiet;
  c10::WarningUtils::WarningHandlerGuard quieted(&quiet);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", std::nullopt, __FILE__, __LINE__);
#ifdef TRITONBLAS_CUDA
  lib->impl("mm", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(mm<c10::DispatchKey::CUDA>)));
  lib->impl("addmm", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(addmm<c10::DispatchKey::CUDA>)));
  lib->impl("_scaled_mm", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(scaled_mm<c10::DispatchKey::CUDA>)));
  lib->impl("_grouped_mm", torch::dispatch(c10::DispatchKey::CUDA, TORCH_FN(grouped_mm<c10::DispatchKey::CUDA>)));
#endif
  if (cpu) {
    lib->impl("mm", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(mm<c10::DispatchKey::CPU>)));
    lib->impl("addmm", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(addmm<c10::DispatchKey::CPU>)));
    lib->impl("_scaled_mm", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(scaled_mm<c10::DispatchKey::CPU>)));
    lib->impl("_grouped_mm", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(grouped_mm<c10::DispatchKey::CPU>)));
  }
  installed = std::move(lib);
}

void uninstall() {
  std::unique_ptr<torch::Library> lib;
  {
    std::lock_guard<std::mutex> guard(mutex);
    lib = std::move(installed);
  }
  // (dropped outside the lock: deregistration takes the dispatcher's)
}

void forget() {
  std::lock_guard<std::mutex> guard(mutex);
  answers.clear();
}

int64_t remembered() {
  std::lock_guard<std::mutex> guard(mutex);
  return static_cast<int64_t>(answers.size());
}

bool has_cuda() {
#ifdef TRITONBLAS_CUDA
  return true;
#else
  return false;
#endif
}

// Whether front.cpp (the explicit ops' Python module) is built into this library.
bool has_front() {
#ifdef TRITONBLAS_FRONT
  return true;
#else
  return false;
#endif
}

}  // namespace

TORCH_LIBRARY(tritonblas_native, m) {
  // Implemented in Python (tritonblas/transparent.py) at the CUDA and CPU keys: the call's output, or
  // none (then torch's kernel runs). Before it returns, the Python side says the Answer for later calls
  // of the same key and KERNEL's launch record (launch.h; empty for other answers) through `answer`,
  // unless it is ASK.
  m.def("routed_mm(Tensor a, Tensor b) -> Tensor?");
  m.def("routed_addmm(Tensor self, Tensor a, Tensor b, Scalar beta, Scalar alpha) -> Tensor?");
  m.def("routed_scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, Tensor? scale_result, "
        "ScalarType? out_dtype, bool use_fast_accum) -> Tensor?");
  m.def("routed_grouped_mm(Tensor a, Tensor b, Tensor? offs, ScalarType? out_dtype) -> Tensor?");
  m.def("answer(int answer, int[] record) -> ()", say);
  m.def("install(bool cpu) -> ()", install);
  m.def("uninstall() -> ()", uninstall);
  m.def("forget() -> ()", forget);
  m.def("remembered() -> int", remembered);
  m.def("has_cuda() -> bool", has_cuda);
  m.def("has_front() -> bool", has_front);
  // Tests of launch.cpp on the CPU: a record as parse_launch reads it (empty: refused), the buffer pool.
  m.def("parsed(int[] record) -> int[]", [](std::vector<int64_t> record) {
    const std::shared_ptr<const Launch> launch = parse_launch(record);
    return launch ? record_words(*launch) : std::vector<int64_t>{};
  });
  m.def("pool_probe(int[] record, int[] steps) -> int[]", pool_probe);
}
