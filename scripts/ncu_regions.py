#!/usr/bin/env python3
"""Sum one kernel's ncu samples and instruction counts by source region (off the GPU machine).

ncu's source page, as device_check.sh saves it (detail_src.csv.gz: `--print-source sass --csv`), gives
every SASS address its warp-stall samples (with their reasons) and its executed instructions. This maps
the addresses to source lines through `nvdisasm -g -c` of the same kernel built with -lineinfo (its SASS
is the plain build's), and sums them over regions given as their first source lines. Lines of other files
(inlined headers) and of the helpers above the kernel count for the kernel line before them.

usage: scripts/ncu_regions.py DISASM.txt SRC.csv[.gz] FUNCTION FILE KERNEL_LINE LINE:NAME [LINE:NAME ...]
  DISASM.txt   nvdisasm -g -c of the cubin (cuobjdump -xelf pulls it out of the binary; where the toolkit
               lacks both tools, NVIDIA's PyPI wheels nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump carry them)
  FUNCTION     the mangled name, e.g. _Z13k_chunk_intraILi128EEv10chunk_args
  FILE         the kernel's source file name, e.g. kda_chunked.cu
  KERNEL_LINE  the kernel's first line; LINE:NAME a region from LINE on (the lines before the first: "start")
"""
import re
import sys

from ncu_step import csv_table


def line_map(path, function, file_name, kernel_line):
    """SASS offset -> the kernel's source line."""
    out, inside, cur = {}, False, kernel_line
    for ln in open(path):
        if ln.startswith("//----") and ".text." in ln:
            inside = (".text." + function + " ") in ln
            continue
        if not inside:
            continue
        m = re.search(r'File "([^"]+)", line (\d+)', ln)
        if m:
            if m.group(1).endswith(file_name) and int(m.group(2)) >= kernel_line:
                cur = int(m.group(2))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s", ln)
        if m:
            out[int(m.group(1), 16)] = cur
    return out


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    dis, src, function, file_name, kernel_line = sys.argv[1:6]
    regions = [(0, "start")] + [(int(a.split(":", 1)[0]), a.split(":", 1)[1]) for a in sys.argv[6:]]
    regions.sort()
    offs = line_map(dis, function, file_name, int(kernel_line))
    if not offs:
        sys.exit("no SASS of %s in %s" % (function, dis))
    rows = csv_table(src, ('"Address"',))
    if not rows:
        sys.exit("%s: no SASS rows" % src)
    hdr = list(rows[0].keys())
    ia, isamp, iinst = "Address", "Warp Stall Sampling (All Samples)", "Instructions Executed"
    reasons = [(h, h[6:]) for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda v: float((v or "0").replace(",", "") or 0)
    base = int(rows[0][ia], 16)
    agg, missing = {}, 0
    for r in rows:
        off = int(r[ia], 16) - base
        if off not in offs:
            missing += 1
        line = offs.get(off, 0)
        name = [n for l, n in regions if line >= l][-1]
        a = agg.setdefault(name, [0.0, 0.0, [0.0] * len(reasons)])
        a[0] += num(r[isamp])
        a[1] += num(r[iinst])
        for k, (c, _) in enumerate(reasons):
            a[2][k] += num(r[c])
    ts = sum(a[0] for a in agg.values()) or 1.0
    ti = sum(a[1] for a in agg.values()) or 1.0
    print("%d SASS rows (%d without a line), %.0f samples, %.0f warp instructions" % (len(rows), missing, ts, ti))
    print("| region | stall samples | warp instructions | top stall reasons (share of all samples) |")
    print("|---|---|---|---|")
    for _, name in regions:
        if name in agg:
            s, n, v = agg[name]
            top = sorted(range(len(v)), key=lambda k: -v[k])[:3]
            why = ", ".join("%s %.1f%%" % (reasons[k][1], 100 * v[k] / ts) for k in top)
            print("| %s | %.1f%% | %.1f%% | %s |" % (name, 100 * s / ts, 100 * n / ti, why))


if __name__ == "__main__":
    main()
