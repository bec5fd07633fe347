#!/usr/bin/env python3
"""Summarize one decode step from an ncu CSV of bench_target (for the GPU machine).

Reads the CSV that `ncu --graph-profiling node --metrics gpu__time_duration.sum
--csv` wrote for `bench_target ... --batch 1` and prints, for the step between
the 2nd and 3rd selection kernel (k_select: one per forward), every kernel
(name, grid) with its count, mean and total time, and the step's sum.

usage: scripts/ncu_step.py NCU.csv [--step N]
"""
import collections
import csv
import gzip
import io
import sys


def csv_table(path, heads):
    """The rows of the first CSV table in an ncu output whose header line starts with one of heads."""
    opener = gzip.open if path.endswith(".gz") else open
    lines = opener(path, "rt", encoding="utf-8", errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith(heads)), None)
    if start is None:
        sys.exit("%s: no ncu CSV table in it (first lines: %r)" % (path, lines[:3]))
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    step = int(sys.argv[sys.argv.index("--step") + 1]) if "--step" in sys.argv else 1
    rows = csv_table(sys.argv[1], ('"ID"',))
    seq = [(r["Kernel Name"], r["Grid Size"], float(r["Metric Value"].replace(",", ""))) for r in rows
           if r.get("Metric Name") == "gpu__time_duration.sum"]
    sel = [i for i, s in enumerate(seq) if s[0].startswith("k_select")]
    if len(sel) < step + 2:
        sys.exit("%s: %d selections, need %d (profile more launches)" % (sys.argv[1], len(sel), step + 2))
    a, b = sel[step] + 1, sel[step + 1] + 1
    agg = collections.OrderedDict()
    for name, grid, ns in seq[a:b]:
        e = agg.setdefault((name[:60], grid), [0, 0.0])
        e[0] += 1
        e[1] += ns
    print("%-62s %-14s %5s %10s %10s" % ("kernel", "grid", "n", "mean us", "sum us"))
    for (name, grid), (n, ns) in agg.items():
        print("%-62s %-14s %5d %10.2f %10.1f" % (name, grid, n, ns / n / 1e3, ns / 1e3))
    print("step: %d kernels, %.3f ms" % (b - a, sum(s[2] for s in seq[a:b]) / 1e6))


if __name__ == "__main__":
    main()
