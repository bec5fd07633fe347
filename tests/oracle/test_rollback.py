#!/usr/bin/env python3
"""Randomized rollback of both caches (tests/rollback_driver.c): a few thousand
rounds of propose / verify with forced acceptance patterns on a tiny random
target + draft pair, both caches compared with ones built from scratch over the
committed text at checkpoints (bit for bit), alone and at TP 2 under mpirun.

  test_rollback.py --driver PATH"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import make_dspark  # noqa: E402
import make_qwen3  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--rounds", type=int, nargs=2, default=[2500, 400], help="rounds at TP 1 and TP 2")
    a = ap.parse_args()
    bad = 0
    with harness.Workdir() as wd:
        t, d = wd.file("t"), wd.file("d")
        make_qwen3.make(t, layers=3, seed=11, max_pos=8192)
        make_dspark.make(t, d, layers=2, taps=[0, 1], markov_rank=16, block_size=7, seed=12)
        for np_, rounds, seed in ((1, a.rounds[0], 1), (2, a.rounds[1], 2)):
            rc, so, se, dt = harness.run([a.driver, t, d, str(rounds), str(seed)], np_=np_, timeout=900)
            print("TP%d: exit %s in %.0f s: %s" % (np_, rc, dt, (so.strip() or se.strip()[-400:])))
            bad += rc != 0 or "0 differ" not in so
    print("test_rollback: %s" % ("FAILED" if bad else "passed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
