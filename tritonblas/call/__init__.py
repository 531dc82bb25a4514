"""The call path: the public ops (`ops`), their argument checks (`validate`), a call's plan and its run
(`path`, `run`), the custom op for autograd and torch.compile (`core_op`) and the caches' drop (`caches`)."""
