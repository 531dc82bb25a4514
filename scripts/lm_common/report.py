"""The tables scripts/model_bench.py prints: the parts timed, the logits errors, the training-step profiles
(--profile). Full kernel names and every row are in the JSON."""

from __future__ import annotations

PROFILE_ROWS = 12  # kernels listed per model in the table


def _ms(r: dict, key: str, fmt: str = ".3f", unit: str = "") -> str:
    return "-" if r.get(key) is None else f"{r[key]:{fmt}}{unit}"


def format_row(r: dict) -> str:
    """One markdown table row of a part."""
    shape = f"b{r['batch']}" + (f" s{r['seq']}" if "seq" in r else f" p{r['prompt']}+{r['new_tokens']}")
    notes = [f"{k.removeprefix('error_')} failed: {v}" for k, v in r.items() if k.startswith("error_")]
    if r.get("speedup_middle_half"):
        notes.append("rounds {:.3f}-{:.3f}x".format(*r["speedup_middle_half"]))
    agree, own = r.get("ours_tokens_as_torch_eager"), r.get("torch_tokens_as_torch_eager")
    if agree is not None:
        notes.append(f"tokens as torch eager: {agree:.2f}")
    if own is not None and own != 1.0:  # torch's own graph decode should give its eager tokens
        notes.append(f"torch's own: {own:.2f}")
    return (f"| {r['model']} | {r['part']} | {shape} | {_ms(r, 'torch_ms')} | {_ms(r, 'ours_ms')} | "
            f"{_ms(r, 'speedup', '.3f', 'x')} | {'; '.join(notes)} |")


def _other(doc: dict) -> str:
    return "torch again (--control: the protocol's spread)" if doc.get("control") else "transparent mode"


def table(doc: dict) -> str:
    fp8 = doc.get("fp8")
    precision = f"fp8 {fp8}" if fp8 else doc["dtype"]
    lines = [f"Models on {doc['device']} ({precision}, torch {doc['torch']}, transformers "
             f"{doc['transformers']}): torch vs {_other(doc)}, {doc['reps']} interleaved rounds (speedup: "
             "the median round's torch / ours; note: the middle half of the rounds)",
             "", "| model | part | shape | torch ms | ours ms | speedup | note |",
             "|---|---|---|---|---|---|---|"]
    for m in doc["models"]:
        lines.extend(format_row(r) for r in m["rows"])
    return "\n".join(lines + ["", *error_table(doc)]) + _profiles(doc)


def error_table(doc: dict) -> list[str]:
    """The logits errors: each side's against float32's (bf16's with --fp8: the quantization's error),
    with --fp8 ours against torch's too, and a mixture of experts' share of (layer, token) expert choices
    equal to the reference's, which tells a token moved to another expert (a large logits error from the
    dtype alone) from a GEMM's error."""
    fp8 = doc.get("fp8")
    ref = "bf16" if fp8 else "fp32"
    versus = f"fp8 {fp8} vs bf16" if fp8 else f"{doc['dtype']} vs fp32"
    extra = " ours vs torch |" if fp8 else ""
    lines = [f"| model | params | logits error torch ({versus}) | ours |{extra} experts as {ref}'s torch / "
             f"ours |", "|---|---|---|---|" + "---|" * (2 if fp8 else 1)]
    for m in doc["models"]:
        if "skipped" in m:
            lines.append(f"| {m['model']} | {m['params'] / 1e6:.1f}M | skipped: {m['skipped']} |")
            continue
        e = m["logits_error"]
        cells = [f"failed: {e[f'error_{side}']}" if e.get(side) is None else f"{e[side]:.3e}"
                 for side in ("torch", "ours")]
        if fp8:
            cells.append(_ms(e, "ours_vs_torch", ".3e"))
        experts = " / ".join(_ms(e, f"experts_as_{ref}_{side}", ".3f") for side in ("torch", "ours"))
        lines.append(f"| {m['model']} | {m['params'] / 1e6:.1f}M | {' | '.join(cells)} | "
                     f"{'-' if experts == '- / -' else experts} |")
    return lines


PROFILED = {"profile": "Training step", "profile_prefill": "Prefill"}


def _profiles(doc: dict) -> str:
    tables = []
    for key, title in PROFILED.items():
        profiled = [m for m in doc["models"] if key in m]
        if profiled:
            tables.append(profile_table(profiled, key, title))
    return "".join("\n\n" + t for t in tables)


def profile_table(models: list[dict], key: str = "profile", title: str = "Training step") -> str:
    """The profiles of one part (--profile): totals, then the kernels ours launches more often."""
    lines = [f"{title}, one profiled call a side (torch.profiler): kernel launches and device us, all",
             "kernels and GEMM kernels (the part a faster GEMM can shorten)",
             "", "| model | torch launches | torch us | torch GEMM us | ours launches | ours us | "
             "ours GEMM us | extra copy/elementwise launches | aten::mm torch / ours | "
             "aten::_grouped_mm torch / ours | aten::copy_ torch / ours |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        if "error" in m[key]:
            lines.append(f"| {m['model']} | failed: {m[key]['error']} |")
            continue
        p, k, ops = m[key], m[key]["kernels"], m[key]["host_ops"]
        lines.append(f"| {m['model']} | {k['torch']['launches']} | {k['torch']['us']:.0f} | "
                     f"{k['torch']['gemm_us']:.0f} | {k['ours']['launches']} | {k['ours']['us']:.0f} | "
                     f"{k['ours']['gemm_us']:.0f} | "
                     f"{p['ours_extra_copy_or_elementwise_launches']} | "
                     + " | ".join(f"{ops['torch'].get(op, 0)} / {ops['ours'].get(op, 0)}"
                                  for op in ("aten::mm", "aten::_grouped_mm", "aten::copy_")) + " |")
    lines += ["", f"Kernels ours launches more often than torch's ({title.lower()}, most extra time first)",
              "",
              "| model | kernel | kind | ours n | torch n | ours us | torch us |",
              "|---|---|---|---|---|---|---|"]
    for m in models:
        for r in m[key].get("ours_extra", [])[:PROFILE_ROWS]:
            name = r["name"] if len(r["name"]) <= 90 else r["name"][:87] + "..."
            lines.append(f"| {m['model']} | `{name}` | {r['kind']} | {r['ours_count']} | "
                         f"{r['torch_count']} | {r['ours_us']:.1f} | {r['torch_us']:.1f} |")
    return "\n".join(lines)
