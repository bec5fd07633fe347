#!/usr/bin/env python3
"""Contract 4 (greedy selection) and contract 3's RNE, case by case, through
`dspark head` on every path, TP sizes 1, 2, 3, 4, 5, 8 (3, 5 and 8 pad the
52 rows) and both contracts. The expected ids are written from the contract
in table.py; the oracle must agree with them, and the program's tokens and
corrected logits must equal both."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref  # noqa: E402
import table  # noqa: E402

PATHS = ("original", "sharded", "replicated")
CONTRACTS = (("bf16", 4), ("fp32-add", 5))


def main():
    harness.program()
    tally = harness.Tally()
    lm, w1, w2 = table.weights()
    hidden, anchor, cases = table.inputs()
    names = [c[0] for c in cases]
    want = {}
    for contract, col in CONTRACTS:
        expect = np.array([[c[col]] for c in cases], np.int64)
        tokens, logits = ref.head(lm, w1, w2, table.V, hidden, anchor, contract=contract)
        if not tally.tokens_eq("oracle vs table (%s)" % contract, tokens, expect):
            for i in range(len(cases)):
                if tokens[i, 0] != expect[i, 0]:
                    print("  case '%s': oracle %d, table %d" % (names[i], tokens[i, 0], expect[i, 0]))
        want[contract] = (expect, logits)
    with harness.Workdir() as wd:
        wpath = wd.file("w.safetensors")
        ipath = wd.file("i.safetensors")
        harness.save_weights(wpath, lm, w1, w2, vocab=table.V)
        harness.save_inputs(ipath, hidden, anchor)
        for tp in table.TP_SIZES:
            for path in PATHS:
                for contract, _ in CONTRACTS:
                    label = "TP%d %s %s" % (tp, path, contract)
                    got = harness.head_run(tally, wd, label, wpath, ipath, np_=tp, path=path,
                                           contract=contract, dump=True)
                    if got is None:
                        continue
                    expect, logits = want[contract]
                    if not tally.tokens_eq(label, got[0], expect):
                        for i in range(len(cases)):
                            if got[0].shape == expect.shape and got[0][i, 0] != expect[i, 0]:
                                print("  case '%s': got %d, want %d" % (
                                    names[i], got[0][i, 0], expect[i, 0]))
                    tally.logits_eq(label, got[1], logits)
    print("cases: %d, TP sizes: %s, paths: %s, contracts: bf16, fp32-add" % (
        len(cases), list(table.TP_SIZES), list(PATHS)))
    return tally.finish("contract_table")


if __name__ == "__main__":
    sys.exit(main())
