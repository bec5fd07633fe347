#!/usr/bin/env python3
"""`dspark info`: the text and --json forms, with small measurements (--quick).
Checks the keys the benchmarks read, their types and that the figures are
positive, and that DSPARK_CPU_KERNEL and bad options do what they say."""
import json
import os
import subprocess
import sys

DSPARK = os.environ["DSPARK"]


def run(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([DSPARK, "info"] + args, capture_output=True, text=True, env=e, timeout=240)


def main():
    r = run(["--quick", "--json"])
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    for key in ("copy_gbps", "product_gflops_lm", "product_gflops_markov"):
        assert isinstance(o[key], float) and o[key] > 0, (key, o[key])
    assert o["kernel"] in ("avx512f", "avx2", "scalar"), o["kernel"]
    assert isinstance(o["threads"], int) and o["threads"] >= 1, o["threads"]
    assert o["mpi_size"] == 1, o["mpi_size"]
    assert o["version"] == "dspark 0.1"
    assert "cpu" in o["backends"] and "mpi" in o["backends"]

    r = run(["--quick"])
    assert r.returncode == 0, r.stderr
    for word in ("dspark 0.1", "backends", "mpi size", "kernel", "threads", "copy bandwidth", "GFLOP/s",
                 "slice of N", "ms per step"):
        assert word in r.stdout, (word, r.stdout)

    cpu = open("/proc/cpuinfo").read()
    if " avx2 " in cpu and " fma " in cpu:
        r = run(["--quick", "--json"], {"DSPARK_CPU_KERNEL": "avx2"})
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["kernel"] == "avx2"

    r = run(["--bogus"])
    assert r.returncode == 2 and "unknown option" in r.stderr, (r.returncode, r.stderr)
    print("dspark info: json and text forms ok")


if __name__ == "__main__":
    sys.exit(main())
