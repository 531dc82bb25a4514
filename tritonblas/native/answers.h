// What route.cpp (transparent mode's aten kernels) and front.cpp (the explicit ops' hit path) share:
// the answers the Python side gave per call key, and the facts a call is keyed by.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Layout.h>

#include <array>
#include <cstdint>

#include "contract.h"

namespace tritonblas_native {

// A call key: contract.h's layout (op, a word of the op's options, then per tensor dtype, device type,
// device index, dim, sizes, strides); what the Python side answered for later calls of a key (Answer)
// and the op codes (Op) are contract.h's too.
using Key = std::array<int64_t, KEY_LEN>;

int64_t known(const Key& key);
void remember(const Key& key, int64_t answer);

// Fills slot `index` (0-5) of the key from a dense tensor of at most `max_dim` dims; false for any
// other (never keyed).
inline bool put(Key& key, int index, const at::Tensor& t, int64_t max_dim = 2) {
  const int64_t dim = t.dim();
  if (dim > max_dim || t.layout() != c10::kStrided || t.is_nested()) return false;
  int64_t* slot = key.data() + 2 + index * SLOT;
  slot[0] = static_cast<int64_t>(t.scalar_type());
  slot[1] = static_cast<int64_t>(t.device().type());
  slot[2] = t.device().index();
  slot[3] = dim;
  for (int64_t i = 0; i < MAX_DIM; ++i) {
    slot[4 + i] = i < dim ? t.size(i) : -1;
    slot[4 + MAX_DIM + i] = i < dim ? t.stride(i) : -1;
  }
  return true;
}

// Marks slot `index` as holding no tensor (dim -2: a 0-dim tensor has dim 0).
inline void absent(Key& key, int index) { key[2 + index * SLOT + 3] = -2; }

// What a scaled_mm call adds to its key (the explicit op's and the routed aten::_scaled_mm's alike: a, b,
// the bias and out= in slots 0-3): the output dtype as given (`out_dtype`, -1 for None) and the
// accumulation in key[1], the two scales in slots 4-5.
inline bool put_scales(Key& key, int64_t out_dtype, bool fast_accum, const at::Tensor& scale_a,
                       const at::Tensor& scale_b) {
  key[1] = (out_dtype + 1) * 2 + (fast_accum ? 1 : 0);
  return put(key, 4, scale_a) && put(key, 5, scale_b);
}

// Whether the current CUDA stream of `t`'s device is being captured into a graph (false off CUDA).
bool capturing(const at::Tensor& t);

// Whether an answer runs torch's op for this call (EAGER_TORCH: unless the stream is being captured).
inline bool torch_answer(int64_t answer, const at::Tensor& a) {
  return answer == TORCH || (answer == EAGER_TORCH && !capturing(a));
}

// Whether a call with this key runs torch's op without asking (`keyed`: the key was filled).
inline bool torch_runs(bool keyed, const Key& key, const at::Tensor& a) {
  return keyed && torch_answer(known(key), a);
}

}  // namespace tritonblas_native
