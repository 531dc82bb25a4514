"""Tuning, in parts (each imports only those above it):

- `space`: the candidate configs of a problem, in the order they are measured;
- `protocol`: the `Benchmark` interface the tuner drives and the `BenchResult` of one candidate;
- `benchmark`: `GpuBenchmark`, the real one (compile, verify against fp64, time through the public ops);
- `tuner`: `tune_problem`, one problem under a time budget, every row and the winner stored;
- `run`: a tuning run, many problems on one device or over several GPUs (`run_tuning`,
  `tune_problems`); `shard`: one host's part of a shapes file (`--shard I/N`).
"""
