"""Dispatch made to pick torch.mm for chosen problems (transparent mode's tests)."""


def pick_torch_where(monkeypatch, wanted) -> None:
    """Dispatch selecting torch.mm for the problems `wanted(problem)` accepts (as tuned configs do where
    cuBLAS won), whatever its layers hold (user DB, shipped, neighbour, heuristic), and its own pick for
    the rest; selections made before are dropped."""
    from tritonblas import GemmConfig
    from tritonblas.selection import dispatch

    real = dispatch._select

    def select(problem, device, enable_streamk, backend):
        if wanted(problem) and backend is None and enable_streamk is None:
            return dispatch.Selection(GemmConfig.vendor(), "heuristic", 0.0, False, problem, device)
        return real(problem, device, enable_streamk, backend)

    monkeypatch.setattr(dispatch, "_select", select)
    dispatch.clear_cache()
