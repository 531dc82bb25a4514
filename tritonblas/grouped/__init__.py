"""Grouped GEMM (mixture-of-experts layers): `grouped_mm` with torch._grouped_mm's semantics."""
