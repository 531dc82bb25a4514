"""Re-pick a shipped config file's winners against torch.mm's baseline of the same tuning run.

Usage: python scripts/repick_vendor.py configs/sm_90.json [--margin 0] [--dry-run]

Every entry of an exported file carries `torch_ms`, torch.mm (torch.addmm with a bias) timed in the
tuning run on the same inputs with the same protocol as the winner's `median_ms`. Until 2026-11-30 the
tuner timed its torch.mm candidate first, while the kernels compiled in threads, and that timing could
read far above the baseline (128x128x8192 bf16: 25.3 us against 11.1), so a slower kernel won. This
rewrites each kernel winner whose baseline beats it by more than --margin as a torch.mm winner timed at
its baseline, keeping the kernel as the entry's `kernel` fallback (what backend="triton" runs), exactly as
an export of a run where torch.mm won would. Timed after the kernels the candidate still read high
(512x4096x4096 nt row bf16: 71.1 us against its 29.3 us baseline), so the tuner now applies this same
rule (tuning.tuner.vendor_beats) to every winner it stores; this script mends files exported before.
Measures nothing and runs on a CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def repick(doc: dict, margin: float | None = None) -> list[dict]:
    """Rewrite `doc`'s entries in place; returns the entries that changed (after the change). margin:
    None for the tuner's own (tuning.tuner.VENDOR_MARGIN)."""
    from tritonblas.tuning.tuner import VENDOR_MARGIN, vendor_beats

    margin = VENDOR_MARGIN if margin is None else margin
    changed = []
    for entry in doc["entries"]:
        torch_ms = entry.get("torch_ms")
        if "backend" in entry["config"] or not vendor_beats(entry["median_ms"], torch_ms, margin):
            continue
        entry["kernel"] = {"config": entry["config"], "median_ms": entry["median_ms"]}
        entry["config"] = {"backend": "torch"}
        entry["median_ms"] = torch_ms
        entry["speedup"] = 1.0
        changed.append(entry)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("file", type=Path, help="an exported config file, rewritten in place")
    ap.add_argument("--margin", type=float, default=None,
                    help="the baseline must beat the kernel by more than this fraction (default: the "
                         "tuner's, tuning.tuner.VENDOR_MARGIN)")
    ap.add_argument("--dry-run", action="store_true",
                    help="list the entries that would change; write nothing")
    args = ap.parse_args(argv)

    # Importing the config binds GemmConfig and its feasibility predicate into tuning_db's validation.
    from tritonblas.config import GemmConfig  # noqa: F401
    from tuning_db.exchange import ConfigFile, render

    doc = json.loads(args.file.read_text())
    changed = repick(doc, args.margin)
    for e in changed:
        print(f"{e['m']}x{e['n']}x{e['k']} {e['a_dtype']} {e['layout']} {e['bias']}: kernel "
              f"{e['kernel']['median_ms'] * 1e3:.1f} us -> torch.mm {e['median_ms'] * 1e3:.1f} us")
    text = render(doc["header"], doc["entries"])
    ConfigFile.model_validate_json(text)  # never write a file import would refuse
    if not args.dry_run and changed:
        args.file.write_text(text)
    print(f"{len(changed)} of {len(doc['entries'])} entries {'would change' if args.dry_run else 'changed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
