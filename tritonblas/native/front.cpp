// The explicit ops' hit path in C++ (tritonblas.matmul, addmm, linear and scaled_mm without options:
// call/front.py):
// a call whose key the Python side answered "torch" before runs torch's op from here, as torch's own
// binding would (at::mm, at::addmm, at::linear through the dispatcher, autograd included, the GIL
// released; at::_scaled_mm for scaled_mm, at::_scaled_mm_v2 for its block-wise calls torch's block-wise
// op runs), without the Python signature and plan lookup in front of it.
// Every other call returns None, and the Python path plans and runs it; where that ran torch's op for a
// reason that holds for the key (call.front.answer), it remembers the answer here. The answers are route.cpp's (one
// map, dropped together by forget()).
//
// Why: an explicit call that dispatch gives to torch cost its Python lookup on top of torch's op
// (+2.2 us on the CPU box, +7 us on the H200's host; commit d0a137e, 2026-12-02).
//
// None (the Python path) is also the answer for anything a key cannot hold or torch's binding would
// treat otherwise: a tensor subclass other than Parameter (its __torch_function__), an active torch
// function mode, more than 4 dims, a layout other than strided, CPU tensors while triton's interpreter
// is off (the Python path raises there), and an op that raised here (the Python path raises it as
// torch's binding does).
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#if __has_include(<ATen/ops/_scaled_mm_v2.h>)
#include <ATen/ops/_scaled_mm_v2.h>
#define TRITONBLAS_BLOCKWISE 1  // torch's block-wise scaled mm (F.scaled_mm's op) is in this torch
#endif
#include <c10/core/GradMode.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdlib>
#include <optional>

#include "answers.h"

namespace {
using namespace tritonblas_native;

// A Tensor or Parameter, which torch's bindings run without __torch_function__ (no mode active).
bool plain(PyObject* obj) { return THPVariable_CheckExact(obj); }

const at::Tensor& unpack(PyObject* obj) { return THPVariable_Unpack(obj); }

// As tritonblas.device.interpreter_enabled: TRITON_INTERPRET set to anything but "" and "0".
bool interpreter_on() {
  const char* v = std::getenv("TRITON_INTERPRET");
  return v != nullptr && v[0] != '\0' && !(v[0] == '0' && v[1] == '\0');
}

// The key of an explicit call (op, its grad marking as call.path.signature's, the tensors); false
// where none can be made or the call must go to Python anyway. `c` may be null (no bias).
bool key_of(Key& key, int64_t op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* c,
            int64_t max_dim_a, const at::Tensor* out = nullptr) {
  if (at::impl::torch_function_mode_enabled()) return false;
  if (a.is_cpu() && !interpreter_on()) return false;
  key[0] = op;
  key[1] = c10::GradMode::is_enabled() &&
           (a.requires_grad() || b.requires_grad() || (c != nullptr && c->requires_grad()));
  if (!put(key, 0, a, max_dim_a) || !put(key, 1, b)) return false;
  if (out == nullptr) {
    absent(key, 3);
  } else if (key[1] != 0 || out->requires_grad() || !put(key, 3, *out)) {
    return false;  // (out= refuses autograd: the Python path raises)
  }
  if (c == nullptr) {
    absent(key, 2);
    return true;
  }
  return put(key, 2, *c);
}

// Bytes from a strided tensor's data pointer to the end of its last element (0: no element).
int64_t span(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  return (last + 1) * static_cast<int64_t>(t.element_size());
}

// Whether any byte of `out` lies in `t`'s range, as call.path._overlaps asks of every out= call (the
// Python path then refuses the call).
bool overlaps(const at::Tensor& out, const at::Tensor* t) {
  if (t == nullptr) return false;
  const auto lo = reinterpret_cast<uintptr_t>(out.data_ptr()), p = reinterpret_cast<uintptr_t>(t->data_ptr());
  return p < lo + span(out) && lo < p + span(*t);
}

// The out= tensor of a call (args[i]): null for None; false where it is not one the front takes.
bool out_of(PyObject* obj, const at::Tensor*& out) {
  out = nullptr;
  if (obj == Py_None) return true;
  if (!plain(obj)) return false;
  out = &unpack(obj);
  return true;
}

// The key of a scaled_mm call, args (a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out):
// key_of's, then put_scales' (answers.h). False where none can be made, and where a tensor needs grad
// (the Python path's result raises on backward).
bool scaled_key(Key& key, PyObject* const* args, const at::Tensor*& out) {
  if (!plain(args[0]) || !plain(args[1]) || !plain(args[2]) || !plain(args[3]) ||
      (args[4] != Py_None && !plain(args[4])) || (args[5] != Py_None && !THPDtype_Check(args[5])) ||
      (args[6] != Py_True && args[6] != Py_False) || !out_of(args[7], out)) {
    return false;
  }
  const at::Tensor* bias = args[4] == Py_None ? nullptr : &unpack(args[4]);
  const at::Tensor &scale_a = unpack(args[2]), &scale_b = unpack(args[3]);
  const int64_t dtype =
      args[5] == Py_None ? -1 : static_cast<int64_t>(reinterpret_cast<THPDtype*>(args[5])->scalar_type);
  if (!key_of(key, SCALED_MM, unpack(args[0]), unpack(args[1]), bias, 2, out) || key[1] != 0 ||
      (c10::GradMode::is_enabled() && (scale_a.requires_grad() || scale_b.requires_grad()))) {
    return false;
  }
  return put_scales(key, dtype, args[6] == Py_True, scale_a, scale_b);
}

// The GIL released while torch's op runs, as torch's bindings do.
struct Released {
  PyThreadState* state = PyEval_SaveThread();
  ~Released() { PyEval_RestoreThread(state); }
};

template <typename F>
PyObject* run(F&& op) {
  std::optional<at::Tensor> out;
  try {
    Released released;
    out = op();
  } catch (const std::exception&) {
    Py_RETURN_NONE;  // the Python path runs it again, and raises as torch's binding does
  }
  return THPVariable_Wrap(std::move(*out));
}

// As run, for an op that writes the caller's out= tensor: that object is the result, as torch's.
template <typename F>
PyObject* run_into(F&& op, PyObject* out) {
  try {
    Released released;
    op();
  } catch (const std::exception&) {
    Py_RETURN_NONE;
  }
  Py_INCREF(out);
  return out;
}

bool number(PyObject* obj) { return PyFloat_CheckExact(obj) || PyLong_CheckExact(obj); }

// mm(a, b, out): out may be None.
PyObject* mm_call(PyObject* const* args, Py_ssize_t nargs) {
  const at::Tensor* out = nullptr;
  if (nargs != 3 || !plain(args[0]) || !plain(args[1]) || !out_of(args[2], out)) Py_RETURN_NONE;
  const at::Tensor &a = unpack(args[0]), &b = unpack(args[1]);
  Key key{};
  if (!key_of(key, MATMUL, a, b, nullptr, 2, out) || !torch_runs(true, key, a)) Py_RETURN_NONE;
  if (out == nullptr) return run([&] { return at::mm(a, b); });
  if (overlaps(*out, &a) || overlaps(*out, &b)) Py_RETURN_NONE;
  return run_into([&] { at::mm_out(const_cast<at::Tensor&>(*out), a, b); }, args[2]);
}

// addmm(input, a, b, beta, alpha, out): out may be None.
PyObject* addmm_call(PyObject* const* args, Py_ssize_t nargs) {
  const at::Tensor* out = nullptr;
  if (nargs != 6 || !plain(args[0]) || !plain(args[1]) || !plain(args[2]) || !number(args[3]) ||
      !number(args[4]) || !out_of(args[5], out)) {
    Py_RETURN_NONE;
  }
  const double beta = PyFloat_AsDouble(args[3]), alpha = PyFloat_AsDouble(args[4]);
  if (PyErr_Occurred()) {  // an int too large for a double: the Python path says so
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  const at::Tensor &input = unpack(args[0]), &a = unpack(args[1]), &b = unpack(args[2]);
  Key key{};
  if (!key_of(key, beta != 0.0 ? ADDMM : ADDMM0, a, b, &input, 2, out) || !torch_runs(true, key, a)) {
    Py_RETURN_NONE;
  }
  if (out == nullptr) return run([&] { return at::addmm(input, a, b, beta, alpha); });
  if (overlaps(*out, &a) || overlaps(*out, &b) || overlaps(*out, &input)) Py_RETURN_NONE;
  return run_into([&] { at::addmm_out(const_cast<at::Tensor&>(*out), input, a, b, beta, alpha); }, args[5]);
}

PyObject* linear_call(PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !plain(args[0]) || !plain(args[1]) || (args[2] != Py_None && !plain(args[2]))) {
    Py_RETURN_NONE;
  }
  const at::Tensor &x = unpack(args[0]), &w = unpack(args[1]);
  const at::Tensor* bias = args[2] == Py_None ? nullptr : &unpack(args[2]);
  Key key{};
  if (!key_of(key, LINEAR, x, w, bias, MAX_DIM) || !torch_runs(true, key, x)) Py_RETURN_NONE;
  return run([&] { return at::linear(x, w, bias ? std::optional<at::Tensor>(*bias) : std::nullopt); });
}

// A block-wise call (scaled_mm's key under SCALED_MM_BLOCK) answered with torch's block-wise op:
// aten::_scaled_mm_v2 as F.scaled_mm calls it (BlockWise1x128 x BlockWise128x128, a bf16 result; the
// Python side answers so only without a bias or out=, its scales already outer-dim-major).
PyObject* block_call(Key& key, PyObject* const* args) {
#ifdef TRITONBLAS_BLOCKWISE
  key[0] = SCALED_MM_BLOCK;
  const at::Tensor& a = unpack(args[0]);
  if (!torch_runs(true, key, a)) Py_RETURN_NONE;
  const at::Tensor &b = unpack(args[1]), &scale_a = unpack(args[2]), &scale_b = unpack(args[3]);
  const int64_t recipe_a[] = {BLOCKWISE_1X128}, recipe_b[] = {BLOCKWISE_128X128};
  return run([&] {
    return at::_scaled_mm_v2(a, b, at::TensorList(&scale_a, 1), recipe_a, at::IntArrayRef(),
                             at::TensorList(&scale_b, 1), recipe_b, at::IntArrayRef(), std::nullopt,
                             at::kBFloat16, at::IntArrayRef(), false);
  });
#else
  (void)key;
  (void)args;
  Py_RETURN_NONE;
#endif
}

// scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out): out may be None.
PyObject* scaled_mm_call(PyObject* const* args, Py_ssize_t nargs) {
  Key key{};
  const at::Tensor* out = nullptr;
  if (nargs != 8 || !scaled_key(key, args, out)) Py_RETURN_NONE;
  if (!torch_runs(true, key, unpack(args[0]))) return block_call(key, args);
  const at::Tensor &a = unpack(args[0]), &b = unpack(args[1]), &scale_a = unpack(args[2]),
                   &scale_b = unpack(args[3]);
  const at::Tensor* bias_tensor = args[4] == Py_None ? nullptr : &unpack(args[4]);
  const std::optional<at::Tensor> bias = bias_tensor ? std::optional<at::Tensor>(*bias_tensor) : std::nullopt;
  const std::optional<at::ScalarType> out_dtype =
      args[5] == Py_None ? std::nullopt
                         : std::optional<at::ScalarType>(reinterpret_cast<THPDtype*>(args[5])->scalar_type);
  const bool fast = args[6] == Py_True;
  if (out == nullptr) {
    return run([&] { return at::_scaled_mm(a, b, scale_a, scale_b, bias, std::nullopt, out_dtype, fast); });
  }
  if (overlaps(*out, &a) || overlaps(*out, &b) || overlaps(*out, &scale_a) || overlaps(*out, &scale_b) ||
      overlaps(*out, bias_tensor)) {
    Py_RETURN_NONE;
  }
  return run_into([&] {
    at::_scaled_mm_out(const_cast<at::Tensor&>(*out), a, b, scale_a, scale_b, bias, std::nullopt, out_dtype, fast);
  }, args[7]);
}

// The entry points: a tensor that cannot be keyed by its strides (one of torch.func's wrappers, say)
// makes the key's reads throw; the call then takes the Python path.
template <PyObject* (*Call)(PyObject* const*, Py_ssize_t)>
PyObject* guarded(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  try {
    return Call(args, nargs);
  } catch (const std::exception&) {
    Py_RETURN_NONE;
  }
}

// remember(op, a, b, c, out, answer): the Python side's answer for the key of this call (a, b, c as in
// key_of: the GEMM's operands, or a linear's x and weight; c the bias or addmm's input, or None; out
// the out= tensor or None). Calls the front never answers (a tensor subclass) are not remembered.
PyObject* remember_answer(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || !PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[5])) {
    PyErr_SetString(PyExc_TypeError, "remember(op: int, a: Tensor, b: Tensor, c: Tensor | None, "
                                     "out: Tensor | None, answer: int)");
    return nullptr;
  }
  const at::Tensor* out = nullptr;
  if (!plain(args[1]) || !plain(args[2]) || (args[3] != Py_None && !plain(args[3])) || !out_of(args[4], out)) {
    Py_RETURN_NONE;
  }
  const int64_t op = PyLong_AsLongLong(args[0]);
  const at::Tensor* c = args[3] == Py_None ? nullptr : &unpack(args[3]);
  Key key{};
  try {
    if (key_of(key, op, unpack(args[1]), unpack(args[2]), c, op == LINEAR ? MAX_DIM : 2, out)) {
      remember(key, PyLong_AsLongLong(args[5]));
    }
  } catch (const std::exception&) {  // (not keyed: not remembered)
  }
  Py_RETURN_NONE;
}

// remember_scaled(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out, answer, op): as
// remember, for a scaled_mm call (op SCALED_MM, or SCALED_MM_BLOCK: torch's block-wise op).
PyObject* remember_scaled(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 10 || !PyLong_CheckExact(args[8]) || !PyLong_CheckExact(args[9])) {
    PyErr_SetString(PyExc_TypeError, "remember_scaled(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, "
                                     "out, answer: int, op: int)");
    return nullptr;
  }
  Key key{};
  const at::Tensor* out = nullptr;
  try {
    if (scaled_key(key, args, out)) {
      key[0] = PyLong_AsLongLong(args[9]);
      remember(key, PyLong_AsLongLong(args[8]));
    }
  } catch (const std::exception&) {  // (not keyed: not remembered)
  }
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"mm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guarded<mm_call>)), METH_FASTCALL,
     "mm(a, b, out): torch.mm's result where the key was answered torch, else None"},
    {"addmm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guarded<addmm_call>)), METH_FASTCALL,
     "addmm(input, a, b, beta, alpha, out): torch.addmm's result where the key was answered torch, else None"},
    {"linear", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guarded<linear_call>)), METH_FASTCALL,
     "linear(x, weight, bias): F.linear's result where the key was answered torch, else None"},
    {"scaled_mm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guarded<scaled_mm_call>)), METH_FASTCALL,
     "scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out): torch._scaled_mm's result "
     "where the key was answered torch, else None"},
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(remember_answer)), METH_FASTCALL,
     "remember(op, a, b, c, out, answer): the answer for this call's key"},
    {"remember_scaled", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(remember_scaled)),
     METH_FASTCALL,
     "remember_scaled(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out, answer, op)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "tritonblas_native", "The explicit ops' C++ front.", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit_tritonblas_native() {
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  PyModule_AddIntConstant(m, "MATMUL", MATMUL);
  PyModule_AddIntConstant(m, "ADDMM", ADDMM);
  PyModule_AddIntConstant(m, "ADDMM0", ADDMM0);
  PyModule_AddIntConstant(m, "LINEAR", LINEAR);
  PyModule_AddIntConstant(m, "SCALED_MM", SCALED_MM);
  PyModule_AddIntConstant(m, "SCALED_MM_BLOCK", SCALED_MM_BLOCK);
#ifdef TRITONBLAS_BLOCKWISE
  PyModule_AddIntConstant(m, "BLOCKWISE", 1);
#else
  PyModule_AddIntConstant(m, "BLOCKWISE", 0);
#endif
  PyModule_AddIntConstant(m, "TORCH", TORCH);
  PyModule_AddIntConstant(m, "EAGER_TORCH", EAGER_TORCH);
  return m;
}
