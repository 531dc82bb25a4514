"""Dispatch made to pick torch.mm, or a kernel timed as the test needs, for chosen problems (transparent
mode's tests)."""


def pick_torch_where(monkeypatch, wanted) -> None:
    """Dispatch selecting torch.mm for the problems `wanted(problem)` accepts (as tuned configs do where
    cuBLAS won), whatever its layers hold (user DB, shipped, neighbour, heuristic), and its own pick for
    the rest; selections made before are dropped."""
    from tritonblas import GemmConfig
    from tritonblas.selection import dispatch

    _pick_where(monkeypatch, wanted, lambda problem, device: dispatch.Selection(
        GemmConfig.vendor(), "heuristic", 0.0, False, problem, device))


def pick_kernel_where(monkeypatch, wanted, time_ms: float) -> None:
    """Dispatch selecting the heuristic's best kernel, as if tuned at `time_ms` with torch not timed, for
    the problems `wanted(problem)` accepts, whatever the shipped file says of them."""
    from tritonblas.selection import dispatch, heuristic

    _pick_where(monkeypatch, wanted, lambda problem, device: dispatch.Selection(
        heuristic.rank(problem, device)[0].config, "db", time_ms, True, problem, device))


def _pick_where(monkeypatch, wanted, selection) -> None:
    from tritonblas.selection import dispatch

    real = dispatch._select

    def select(problem, device, enable_streamk, backend):
        if wanted(problem) and backend is None and enable_streamk is None:
            return selection(problem, device)
        return real(problem, device, enable_streamk, backend)

    monkeypatch.setattr(dispatch, "_select", select)
    dispatch.clear_cache()
