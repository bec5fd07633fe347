#!/usr/bin/env python3
"""`dspark info`: the text and --json forms, DSPARK_CPU_KERNEL's effect, bad
options and bad settings (refused with the variable named, exit 2)."""
import json
import os
import subprocess
import sys

DSPARK = os.environ["DSPARK"]


def run(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([DSPARK, "info"] + args, capture_output=True, text=True, env=e, timeout=120)


def main():
    r = run(["--json"])
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    assert o["version"].startswith("dspark "), o
    assert "backends cpu, mpi" in o["build"], o["build"]
    assert o["mpi_size"] == 1 and o["comm"] == "self", o
    assert o["cpu"].startswith("cpu: ") and "threads per process" in o["cpu"], o["cpu"]
    assert any(k in o["cpu"] for k in ("avx512bf16", "avx512f", "avx2", "scalar")), o["cpu"]
    assert "cuda" in o

    r = run([])
    assert r.returncode == 0, r.stderr
    for word in ("dspark ", "build", "mpi size", "cpu", "cuda"):
        assert word in r.stdout, (word, r.stdout)

    cpu = open("/proc/cpuinfo").read()
    if " avx2 " in cpu and " fma " in cpu:
        r = run(["--json"], {"DSPARK_CPU_KERNEL": "avx2"})
        assert r.returncode == 0, r.stderr
        assert "cpu: avx2 kernels" in json.loads(r.stdout)["cpu"], r.stdout
    if " avx512f " in cpu and " avx512bw " in cpu and " avx512dq " in cpu and " avx512vl " in cpu:
        r = run(["--json"], {"DSPARK_CPU_KERNEL": "avx512"})  # the fmaf kernels alone, never vdpbf16ps
        assert r.returncode == 0 and "cpu: avx512f kernels" in json.loads(r.stdout)["cpu"], (r.stdout, r.stderr)
    if " avx512_bf16 " not in cpu:
        r = run(["--json"], {"DSPARK_CPU_KERNEL": "avx512bf16"})  # refused by the CPU: a warning, then auto
        assert r.returncode == 0 and "avx512bf16" in r.stderr and "avx512bf16 kernels" not in r.stdout, (r.stdout,
                                                                                                        r.stderr)
    r = run(["--json"], {"DSPARK_THREADS": "3"})
    assert r.returncode == 0 and "3 threads per process" in json.loads(r.stdout)["cpu"], (r.stdout, r.stderr)

    r = run(["--bogus"])
    assert r.returncode == 2 and "unknown option" in r.stderr, (r.returncode, r.stderr)
    # every switch refuses a value it cannot parse, naming itself and what it accepts
    for var, bad, accepted in (("DSPARK_THREADS", "-1", "integer"), ("DSPARK_THREADS", "two", "integer"),
                               ("DSPARK_CPU_KERNEL", "avx1024", "avx512"), ("DSPARK_QUIET", "yes", "0 or 1"),
                               ("DSPARK_VERBOSE", "2", "0 or 1"), ("DSPARK_GRAPHS", "off", "0 or 1"),
                               ("DSPARK_CUDA_STRICT", "-1", "0 or 1"), ("DSPARK_BUCKETS", "4,,8", "batch sizes"),
                               ("DSPARK_BUCKETS", "0", "batch sizes"), ("DSPARK_CUDA_TAIL", "5", "ring-wgmma"),
                               ("DSPARK_CUDA_TAIL", "ring4", "register"), ("DSPARK_GEMM_SPLIT", "2", "0 or 1"),
                               ("DSPARK_GEMM_TILE", "48", "64x112 or 64x128"), ("DSPARK_CUDA_ATTENTION", "fp16", "tc-one-row or tc-long"),
                               ("DSPARK_CUDA_ATTENTION_SHORT", "2", "auto, 0 or 1")):
        r = run([], {var: bad})
        assert r.returncode == 2, (var, bad, r.returncode, r.stdout, r.stderr)
        assert var in r.stderr and accepted in r.stderr and r.stdout == "", (var, bad, r.stderr)
    print("dspark info: json and text forms ok; 15 bad settings refused")


if __name__ == "__main__":
    sys.exit(main())
