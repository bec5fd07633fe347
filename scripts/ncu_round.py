#!/usr/bin/env python3
"""Kernels of an ncu CSV (`ncu --graph-profiling node --metrics gpu__time_duration.sum --csv`, plain or .gz) in
launch order, consecutive launches of one kernel and grid merged into one line (count, sum), from launch FIRST on
(negative: counted from the end) for COUNT launches. `scripts/device_check.sh attn` with ROUND_NCU=1 writes such
files for bench_spec; a round's proposal and verify are then read off the list.

usage: scripts/ncu_round.py NCU.csv[.gz] [--first N] [--count N] [--width W]
"""
import csv
import gzip
import io
import sys


def launches(path):
    """(kernel name, grid, ns) of every launch, in order."""
    raw = (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8", errors="replace").read()
    lines = raw.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit("%s: no ncu CSV table in it (first lines: %r)" % (path, lines[:3]))
    rows = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    return [(r["Kernel Name"], r["Grid Size"], float(r["Metric Value"].replace(",", "")))
            for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    opt = lambda k, d: int(sys.argv[sys.argv.index(k) + 1]) if k in sys.argv else d
    seq = launches(sys.argv[1])
    first, width = opt("--first", 0), opt("--width", 60)
    first = first + len(seq) if first < 0 else first
    part = seq[first:first + opt("--count", len(seq))]
    runs = []  # [name, grid, first launch, count, ns]
    for i, (name, grid, ns) in enumerate(part):
        if runs and runs[-1][0] == name and runs[-1][1] == grid:
            runs[-1][3] += 1
            runs[-1][4] += ns
        else:
            runs.append([name, grid, first + i, 1, ns])
    print("%7s %-*s %-14s %4s %9s %9s" % ("launch", width, "kernel", "grid", "n", "sum us", "to here"))
    total = 0.0
    for name, grid, at, n, ns in runs:
        total += ns
        print("%7d %-*s %-14s %4d %9.1f %9.1f" % (at, width, name[:width], grid, n, ns / 1e3, total / 1e3))
    print("%d launches of %d, %.3f ms" % (len(part), len(seq), total / 1e6))


if __name__ == "__main__":
    main()
