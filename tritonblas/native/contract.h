// Written by tritonblas/contract.py (python -m tritonblas.contract): the facts the Python and
// C++ sides share. Edit that module, not this file; tests/test_contract.py checks they agree.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tritonblas_native {

constexpr int MAX_DIM = 4;
constexpr int KEY_TENSORS = 6;
constexpr int SLOT = 12;
constexpr int KEY_LEN = 74;
constexpr int64_t BLOCKWISE_1X128 = 4;
constexpr int64_t BLOCKWISE_128X128 = 5;
constexpr int64_t FORMAT = 2;
constexpr int64_t HEAD = 3;
constexpr int64_t BUFFER_WORDS = 2;
constexpr int64_t LAUNCH_HEAD = 7;
constexpr int64_t DESC_WORDS = 10;
constexpr int64_t MAX_BUFFERS = 4;
constexpr int64_t MAX_LAUNCHES = 4;
constexpr int64_t POOL_CAP_BYTES = 2147483648;
constexpr size_t MAX_PARAMS = 96;
constexpr size_t CACHE_CAP = 4096;

enum Answer : int64_t { ASK = 0, TORCH = 1, EAGER_TORCH = 2, KERNEL = 3 };
enum Op : int64_t { ROUTED_MM = 0, ROUTED_ADDMM = 1, ROUTED_ADDMM0 = 2, MATMUL = 3, ADDMM = 4, ADDMM0 = 5, LINEAR = 6, SCALED_MM = 7, ROUTED_SCALED_MM = 8, SCALED_MM_BLOCK = 9, ROUTED_GROUPED_MM = 10 };
enum Kind : int64_t { P_A = 0, P_B = 1, P_C = 2, P_BIAS = 3, P_I32 = 4, P_I64 = 5, P_F32 = 6, P_ALPHA = 7, P_BETA = 8, P_NULL = 9, P_SCRATCH = 10, P_DESC = 11, P_BUF = 12, P_SCALE_A = 13, P_SCALE_B = 14 };

}  // namespace tritonblas_native
