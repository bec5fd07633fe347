#!/usr/bin/env python3
"""Nothing in libdspark is reachable only from bench/: every global symbol the
library defines is declared in include/dspark.h (the public API) or used by
the library itself, the dspark program or a test. A symbol that only a
benchmark uses belongs under bench/.

usage: check_reach.py BUILD_DIR  (reads the object files with nm)"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nm(paths):
    """{object or archive: (defined globals, undefined)} (an archive's members together)."""
    out = {}
    for p in paths:
        r = subprocess.run(["nm", "-g", "--defined-only", p], capture_output=True, text=True)
        d = {ln.split()[-1] for ln in r.stdout.splitlines() if len(ln.split()) == 3 and ln.split()[1] in "TDBR"}
        r = subprocess.run(["nm", "-u", p], capture_output=True, text=True)
        u = {ln.split()[-1] for ln in r.stdout.splitlines() if ln.strip()}
        out[p] = (d, u)
    return out


def main():
    build = sys.argv[1]
    lib = [os.path.join(build, "libdspark.a")]
    if not os.path.exists(lib[0]):
        print("no libdspark.a under %s" % build)
        return 1
    users = {
        "tool": glob.glob(os.path.join(build, "CMakeFiles", "dspark_tool.dir", "**", "*.o"), recursive=True),
        "tests": glob.glob(os.path.join(build, "tests", "CMakeFiles", "**", "*.o"), recursive=True),
        "bench": glob.glob(os.path.join(build, "bench", "CMakeFiles", "**", "*.o"), recursive=True),
    }
    libsyms = nm(lib)
    defined = set().union(*(d for d, _ in libsyms.values()))
    used_in_lib = set().union(*(u for _, u in libsyms.values()))
    used = {k: set().union(set(), *(u for _, u in nm(v).values())) for k, v in users.items()}
    # calls inside the translation unit that defines a symbol leave no undefined reference: count the
    # library sources' calls too (every occurrence outside headers beyond the one definition)
    srcs = [f for f in glob.glob(os.path.join(ROOT, "src", "**", "*"), recursive=True)
            if f.endswith((".c", ".cu", ".cuh"))]
    text = "\n".join(open(f, errors="replace").read() for f in srcs)
    calls = {}
    for m in re.finditer(r"\b(dsp_[a-z0-9_]+)\s*\(", text):
        calls[m.group(1)] = calls.get(m.group(1), 0) + 1
    used_in_lib |= {k for k, n in calls.items() if n > 1}
    public = set(re.findall(r"\b(dsp_[a-z0-9_]+)\s*\(", open(os.path.join(ROOT, "include", "dspark.h")).read()))
    ours = {s for s in defined if s.startswith("dsp_")}
    bench_only = sorted(s for s in ours if s in used["bench"] and s not in used_in_lib and s not in used["tool"]
                        and s not in used["tests"] and s not in public)
    unused = sorted(s for s in ours if not any(s in u for u in used.values()) and s not in used_in_lib
                    and s not in public)
    print("libdspark: %d dsp_ symbols; %d public (dspark.h); checked against the library archive (%d), %d tool, %d test and %d "
          "bench objects" % (len(ours), len(ours & public), len(lib), len(users["tool"]), len(users["tests"]),
                             len(users["bench"])))
    if unused:
        print("defined but used by nothing (not public): %s" % ", ".join(unused))
    if bench_only:
        print("FAIL: reachable only from bench/: %s" % ", ".join(bench_only))
        return 1
    print("ok: no library symbol is reachable only from bench/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
