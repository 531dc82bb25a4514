"""Whether a kernel family's hash (tritonblas.identity) moves with an edit to its kernels or its planning,
and only its own: one check for every family with Gluon kernels beside its Triton ones."""

from __future__ import annotations

from tritonblas import identity


def assert_family_hash_moves(kernels: tuple[str, ...], planning: dict, family_hash: str,
                             kernel_edit: tuple[str, str, str], planning_edit: tuple[str, str, str],
                             dense_too: bool = False) -> None:
    """`kernels`/`planning`: the family's files (identity.*_KERNELS, *_PLANNING), `family_hash` its hash
    now; each edit (file, old text, new text) must change it, and the dense family's sources must hold
    the edited kernel exactly where `dense_too` (a kernel file both families compile)."""
    assert kernel_edit[0] in kernels and (kernel_edit[0] in identity.sources()[0]) == dense_too
    texts = {name: (identity._KERNEL_DIR / name).read_text() for name in kernels}
    modules = {m: (identity._PACKAGE / m).read_text() for m in planning}
    same = identity.code_hash(texts, modules, planning)
    assert same == family_hash
    for edited, where in ((kernel_edit, texts), (planning_edit, modules)):
        name, old, new = edited
        assert old in where[name], f"{old!r} is no longer in {name}"
        changed = dict(where, **{name: where[name].replace(old, new)})
        args = (changed, modules) if where is texts else (texts, changed)
        assert identity.code_hash(*args, planning) != same
