#!/usr/bin/env python3
"""Print the SASS lines of one kernel with the most warp-stall samples (for the GPU machine).

Reads `ncu -i REP --page source --csv --print-source sass` output: the rows
with the largest sampling column, each with its share of all samples.

usage: scripts/ncu_source.py SOURCE.csv [--top N]
"""
import sys

from ncu_step import csv_table


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 30
    rows = csv_table(sys.argv[1], ('"#', '"Address', '"Source'))
    cols = list(rows[0].keys()) if rows else []
    samp = [c for c in cols if "Sampling" in c and "All" in c] or [c for c in cols if "Sampling" in c]
    if not samp:
        sys.exit("no sampling column among %r" % cols)
    key = samp[0]
    num = lambda r: float((r.get(key) or "0").replace(",", "") or 0)
    total = sum(num(r) for r in rows) or 1.0
    src = next((c for c in cols if c in ("Source", "# Source")), cols[1] if len(cols) > 1 else cols[0])
    print("%d SASS rows, %s total %.0f; columns: %s" % (len(rows), key, total, ", ".join(cols[:12])))
    order = sorted(range(len(rows)), key=lambda i: -num(rows[i]))[:top]
    for i in sorted(order):
        print("%5d %6.2f%%  %s" % (i, 100 * num(rows[i]) / total, rows[i][src][:100]))


if __name__ == "__main__":
    main()
