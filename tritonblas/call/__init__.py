"""The call path: the public ops (`ops`), a call's plan (`path`) and its run (`run`), and the custom op
for autograd and torch.compile (`core_op`). Argument checks (tritonblas.validate) and the caches' drop
(tritonblas.caches) sit below selection, which shares them."""
