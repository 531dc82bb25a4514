"""Grouped GEMMs (MoE experts) against torch._grouped_mm, and the tuning run that ships their winners.

For each `op: grouped` entry of a shapes file: operands as a MoE layer holds them (tokens sorted by
expert, weights (E, N, K) row-major used transposed), counts balanced and Zipf-skewed; every candidate
config of tritonblas.grouped.tune timed with torch's op interleaved and the winner checked against
float64 (tritonblas.grouped.tuner.tune_entry, what `tritonblas tune` runs for these entries too);
TFLOP/s, the ratio to torch and, for decode, the time the active experts' weights take to read at
4.8 TB/s. --tune writes the winners table dispatch reads.

    python scripts/grouped_bench.py --shapes scripts/classes/grouped.yaml --json out.json \
        [--tune configs/grouped/sm_90.json] [--quick]

--against TABLE (with --tune): a new kernel's candidates against a table's winners, not a whole tuning
run: each entry the Gluon kernel runs (tune.gluon_candidates) times the table's winner, the Gluon configs
and torch's op, the winner merged into --tune; the table's other keys are kept as they are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from tritonblas.device import tensor_device_info
from tritonblas.grouped import tune, tuner, usertable
from tritonblas.grouped.op import grouped_mm
from tritonblas.grouped.select import select
from tritonblas.grouped.tuner import draws_of, reps_for, timed_us
from tritonblas.shapes import load_grouped

HBM_BYTES_PER_S = 4.8e12


def read_entries(path: Path) -> list[tune.GroupedEntry]:
    return load_grouped(path)


def against(entry: tune.GroupedEntry, table: dict, device) -> list | None:
    """--against's candidates of an entry on `device` (a DeviceInfo): the table's kernel winner and the
    Gluon configs; None where no Gluon config runs its key (the entry is kept as the table has it)."""
    key = tune.entry_key(entry)
    gluon = tune.gluon_candidates(key, device)
    if not gluon:
        return None
    held = table.get(key)
    return ([held] if held is not None and not held.is_vendor else []) + [c for c in gluon if c != held]


def run_entry(entry: tune.GroupedEntry, do_tune: bool, quick: bool,
              configs: list | None = None) -> tuple[dict, tuner.TunedRow]:
    """The entry through the library's tuner (tritonblas.grouped.tuner.tune_entry; without --tune only
    the config dispatch selects; `configs`: these candidates), then what a report adds: dispatch's own
    time and the weights' read."""
    draws = draws_of(entry, "cuda")
    x, w, offs = draws[next(iter(draws))]
    if configs is None and not do_tune:
        configs = [select(tune.entry_key(entry), tensor_device_info(x)).config]
    row = tuner.tune_entry(entry, "cuda", configs=configs, max_candidates=6 if quick else None, draws=draws)
    for note in row.notes:
        print(f"  {note}", flush=True)
    flops = 2.0 * entry.m * entry.n * entry.k
    active = int((torch.diff(offs, prepend=offs.new_zeros(1)) > 0).sum().item())
    result = {
        "entry": entry.text(),
        "key": row.key.__dict__,
        "config": row.best.model_dump() if row.best else None,
        "us": row.us,
        "torch_us": row.torch_us,
        "tflops": {k: flops / v / 1e6 for k, v in row.us.items()},
        "torch_tflops": {k: flops / v / 1e6 for k, v in row.torch_us.items()},
        "ratio": row.ratio,
        "error": row.error,
        "torch_error": row.torch_error,
        "weights_us": active * entry.n * entry.k * x.element_size() / HBM_BYTES_PER_S * 1e6,
        "candidates": row.candidates,
    }
    result["dispatch_us"] = timed_us(lambda: grouped_mm(x, w, offs=offs), reps_for(flops), True)
    return result, row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--tune", type=Path, help="write the winners table here (configs/grouped/<arch>.json)"
    )
    parser.add_argument("--quick", action="store_true", help="the first 6 candidates only")
    parser.add_argument("--against", type=Path,
                        help="time the Gluon configs against this table's winners, merge into --tune")
    args = parser.parse_args(argv)
    if args.against and not args.tune:
        parser.error("--against needs --tune (the table the winners are merged into)")
    entries = read_entries(args.shapes)
    print(f"{len(entries)} grouped entries in {args.shapes}", flush=True)
    if not torch.cuda.is_available():
        print("grouped_bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    results, winners = [], {}
    started = time.time()
    held = usertable.read_table(args.against) if args.against else {}
    device = tensor_device_info(torch.empty(1, device="cuda"))
    for entry in entries:
        if args.tune and tune.entry_key(entry) in winners:
            # (its draws are the first entry's: the later one would only overwrite that winner)
            print(f"{entry.text():<44} skipped: its key was tuned above", flush=True)
            continue
        configs = against(entry, held, device) if args.against else None
        if args.against and configs is None:
            print(f"{entry.text():<44} kept: no Gluon config runs its key", flush=True)
            continue
        r, row = run_entry(entry, args.tune is not None, args.quick, configs)
        results.append(r)
        # torch's op wins a key where the best kernel is slower than it on either count draw
        winners[row.key] = row.winner
        if row.best is None:
            print(f"{entry.text():<44} no kernel ran correctly: torch's op  {time.time() - started:.0f}s")
            continue
        ratio = " ".join(f"{k} {v:.3f}x" for k, v in r["ratio"].items())
        tf = " ".join(f"{k} {v:.0f}/{r['torch_tflops'][k]:.0f}" for k, v in r["tflops"].items())
        print(
            f"{entry.text():<44} {ratio}  TF/s ours/torch {tf}  weights {r['weights_us']:.1f} us  "
            f"ours {min(r['us'].values()):.1f} us dispatch {r['dispatch_us']:.1f} us  err {r['error']:.2e} "
            f"(torch {r['torch_error']:.2e})  {time.time() - started:.0f}s",
            flush=True,
        )
    meta = tune.table_meta("cuda")
    if args.json:
        args.json.write_text(json.dumps({**meta, "results": results}, indent=1))
    if args.tune:
        if args.against:
            if args.tune != args.against and not args.tune.exists():
                usertable.write_table(args.tune, device.arch, held, meta)
            usertable.merge_table(args.tune, device.arch, winners, meta)
        else:
            usertable.write_table(args.tune, device.arch, winners, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
