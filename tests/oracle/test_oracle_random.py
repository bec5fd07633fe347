#!/usr/bin/env python3
"""The oracle against `dspark head` on random shapes and data: greedy, sampled
and mixed batches, both contracts, normal and exact-grid inputs, at TP 1 and
TP 3 on every path; tokens and corrected logits must match bit for bit."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref  # noqa: E402

# (B, gamma, V, Vp, R, H, batch kind, contract, grid inputs)
CONFIGS = [
    (1, 1, 50, 50, 8, 16, "greedy", "bf16", False),
    (3, 4, 257, 260, 32, 64, "sampled", "bf16", False),
    (5, 7, 1000, 1003, 8, 96, "mixed", "fp32-add", False),
    (3, 7, 50, 53, 32, 96, "mixed", "bf16", True),
    (5, 4, 257, 257, 8, 16, "greedy", "fp32-add", True),
    (1, 4, 1000, 1000, 32, 64, "sampled", "fp32-add", False),
    (5, 1, 257, 259, 8, 64, "mixed", "bf16", False),
    (3, 4, 1000, 1001, 32, 16, "sampled", "bf16", True),
]
RUNS = [(1, None), (3, "original"), (3, "sharded"), (3, "replicated")]


def make(rng, B, G, V, Vp, R, H, kind, grid):
    if grid:
        # Small integers times powers of two: every partial sum is exact.
        lm = harness.grid_bf16(rng, (Vp, H), -4, 4, 2.0**-3)
        w1 = harness.grid_bf16(rng, (Vp, R), -4, 4, 2.0**-1)
        w2 = harness.grid_bf16(rng, (Vp, R), -4, 4, 2.0**-3)
        hidden = harness.grid_bf16(rng, (B, G, H), -4, 4, 2.0**-2)
    else:
        lm = harness.rand_bf16(rng, (Vp, H), 1 / math.sqrt(H))
        w1 = harness.rand_bf16(rng, (Vp, R), 1.0)
        w2 = harness.rand_bf16(rng, (Vp, R), 1 / math.sqrt(R))
        hidden = harness.rand_bf16(rng, (B, G, H), 1.0)
    if Vp > V:
        # Padding rows that would win if they were ever selected.
        lm[V:] = ref.bf16(np.abs(ref.f32(lm[V:])) * 8 + 4)
    anchor = rng.integers(0, V, size=B)
    temp = rng.choice(np.array([0.5, 0.7, 1.0, 1.3], np.float32), size=B)
    if kind == "greedy":
        temp = np.zeros(B, np.float32)
    elif kind == "mixed":
        temp[::2] = 0
    seed = rng.integers(-2**63, 2**63 - 1, size=B, dtype=np.int64)
    # Positions whose drafted positions cross 2^32 exercise the counter's high word.
    position = rng.integers(0, 10**6, size=B)
    position[-1] = 2**32 - 3
    return lm, w1, w2, hidden, anchor, temp, seed, position


def main():
    harness.program()
    tally = harness.Tally()
    rng = np.random.default_rng(20240607)
    with harness.Workdir() as wd:
        for ci, (B, G, V, Vp, R, H, kind, contract, grid) in enumerate(CONFIGS):
            lm, w1, w2, hidden, anchor, temp, seed, pos = make(rng, B, G, V, Vp, R, H, kind, grid)
            sampling = kind != "greedy"
            t = temp if sampling else None
            want_tok, want_lg = ref.head(lm, w1, w2, V, hidden, anchor, t, seed, pos, contract)
            wpath = wd.file("w%d.safetensors" % ci)
            ipath = wd.file("i%d.safetensors" % ci)
            harness.save_weights(wpath, lm, w1, w2, vocab=V if Vp != V else None)
            harness.save_inputs(ipath, hidden, anchor, t, seed if sampling else None,
                                pos if sampling else None)
            for tp, path in RUNS:
                label = "config %d (B%d g%d V%d Vp%d R%d H%d %s %s%s) TP%d %s" % (
                    ci, B, G, V, Vp, R, H, kind, contract, " grid" if grid else "", tp,
                    path or "auto")
                got = harness.head_run(tally, wd, label, wpath, ipath, np_=tp, path=path,
                                       contract=contract, dump=True)
                if got is None:
                    continue
                tally.tokens_eq(label, got[0], want_tok)
                tally.logits_eq(label, got[1], want_lg)
    return tally.finish("oracle_random")


if __name__ == "__main__":
    sys.exit(main())
