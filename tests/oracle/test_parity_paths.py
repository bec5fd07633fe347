#!/usr/bin/env python3
"""Parity (DESIGN section 6): original, sharded and replicated paths, TP sizes
1, 2, 3, 4, 5, 8, broadcast on and off, greedy and sampling batches: every run
must give the same tokens (and the oracle's); sampling runs also write the
corrected logits, which must equal the oracle's."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref  # noqa: E402

TP_SIZES = (1, 2, 3, 4, 5, 8)
PATHS = ("original", "sharded", "replicated")
# V = 203 rows padded to 211 in the files; 211 is prime, so every TP size > 1
# pads internally, and TP 8's last rank holds mostly padding.
B, G, V, VP, R, H = 4, 5, 203, 211, 16, 32


def main():
    harness.program()
    tally = harness.Tally()
    rng = np.random.default_rng(77)
    lm = harness.rand_bf16(rng, (VP, H), 1 / math.sqrt(H))
    lm[V:] = ref.bf16(np.abs(ref.f32(lm[V:])) * 8 + 4)
    w1 = harness.rand_bf16(rng, (VP, R), 1.0)
    w2 = harness.rand_bf16(rng, (VP, R), 1 / math.sqrt(R))
    hidden = harness.rand_bf16(rng, (B, G, H), 1.0)
    anchor = rng.integers(0, V, size=B)
    seed = rng.integers(0, 2**63 - 1, size=B, dtype=np.int64)
    pos = rng.integers(0, 1000, size=B)
    temp = np.array([0.8, 0.0, 1.2, 0.6], np.float32)
    with harness.Workdir() as wd:
        wpath = wd.file("w.safetensors")
        harness.save_weights(wpath, lm, w1, w2, vocab=V)
        for mode in ("greedy", "sampling"):
            ipath = wd.file("i_%s.safetensors" % mode)
            t = temp if mode == "sampling" else None
            harness.save_inputs(ipath, hidden, anchor, t, seed, pos)
            want, want_lg = ref.head(lm, w1, w2, V, hidden, anchor, t, seed, pos)
            first = None
            # TP ranks as processes under mpirun, and (broadcast on) as threads of one process
            forms = [(tp, bc, False) for tp in TP_SIZES for bc in ("on", "off")]
            forms += [(tp, "on", True) for tp in TP_SIZES if tp > 1]
            for tp, bc, one in forms:
                for path in PATHS:
                    label = "%s TP%d%s %s broadcast %s" % (mode, tp, " in one process" if one else "", path, bc)
                    got = harness.head_run(tally, wd, label, wpath, ipath, np_=1 if one else tp, path=path,
                                           broadcast=bc, want_logits=(mode == "sampling"),
                                           extra=("--tp", str(tp)) if one else ())
                    if got is None:
                        continue
                    if first is None:
                        first = got[0]
                    elif not tally.tokens_eq(label + " vs first run", got[0], first):
                        continue
                    tally.tokens_eq(label + " vs oracle", got[0], want)
                    if mode == "sampling":
                        tally.logits_eq(label + " logits vs oracle", got[1], want_lg)
    return tally.finish("parity_paths")


if __name__ == "__main__":
    sys.exit(main())
