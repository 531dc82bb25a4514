"""The cooperative 128x256x64 Gluon grouped tile with its output leaving in two 64x128 pieces (C_SPLIT 2:
32 KB of output buffers instead of 64) at 3 and 4 stages, against each key's shipped winner, each through
the library's tuner on its own (balanced and Zipf draws, torch._grouped_mm timed beside). Run on the H200
from this branch: python probe/ring4_probe.py probe/fine.yaml configs/grouped/sm_90.json"""
import sys
from pathlib import Path

from tritonblas import GemmConfig
from tritonblas.grouped import tune, tuner, usertable
from tritonblas.shapes import load_grouped

table = usertable.read_table(Path(sys.argv[2]))
ring = {s: GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=s, tma=True, gluon=True)
        for s in (3, 4)}
for entry in load_grouped(Path(sys.argv[1])):
    key = tune.entry_key(entry)
    held = table.get(key)
    draws = tuner.draws_of(entry, "cuda")
    for rnd in range(2):
        for name, c in (("held", held), ("ring3", ring[3]), ("ring4", ring[4])):
            if c is None or c.is_vendor:
                continue
            row = tuner.tune_entry(entry, "cuda", configs=[c], draws=draws)
            print(f"{entry.text():40s} r{rnd} {name} {c.short():36s} vs torch "
                  f"{ {k: round(v, 3) for k, v in row.ratio.items()} } us "
                  f"{ {k: round(v, 1) for k, v in row.us.items()} } {'; '.join(row.notes)}", flush=True)
