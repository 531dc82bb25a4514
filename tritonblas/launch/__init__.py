"""Launch: a GemmConfig on tensors -> kernel, grid and arguments, launched (`gemm`); the host's Stream-K
planning (`streamk`, pure Python); scratch memory (`scratch`); triton's compile-cache key (`compile_key`)."""
