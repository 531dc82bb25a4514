"""Triton GEMM kernels: shared building blocks (`common`) and two thin kernels that call them."""
