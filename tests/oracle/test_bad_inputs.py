#!/usr/bin/env python3
"""Bad input through `dspark head`, alone and under mpirun -np 3: each must end
with a non-zero exit (not a signal) within the timeout on every rank, a clear
message on stderr (checked for a keyword such as the tensor name), no output
file, and no assertion ('internal error') or sanitizer report. One input that
looks odd but is valid (temperature without seed: seed defaults to 0) must
succeed and match the oracle."""
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref  # noqa: E402
import st  # noqa: E402

B, G, V, VP, R, H = 2, 2, 20, 22, 4, 8
TIMEOUT = 60
FORBIDDEN = ("internal error", "AddressSanitizer", "LeakSanitizer", "runtime error:",
             "Segmentation fault", "exited on signal", "core dumped", "Traceback")


def base():
    rng = np.random.default_rng(3)
    w = {"lm_head.weight": harness.rand_bf16(rng, (VP, H), 1 / math.sqrt(H)),
         "markov_w1.weight": harness.rand_bf16(rng, (VP, R), 1.0),
         "markov_w2.weight": harness.rand_bf16(rng, (VP, R), 1 / math.sqrt(R))}
    i = {"hidden": harness.rand_bf16(rng, (B, G, H), 1.0),
         "anchor": np.array([1, V - 1], np.int64),
         "temperature": np.array([0.0, 0.9], np.float32),
         "seed": np.array([11, 12], np.int64),
         "position": np.array([5, 6], np.int64)}
    return w, i


META = {"vocab_size": str(V)}


def write(path, tensors, meta=META):
    st.save(path, tensors, meta)


def raw(path, data):
    with open(path, "wb") as f:
        f.write(data)


def case_list():
    """(name, keywords (any, case-insensitive; '{W}'/'{I}' are the file names),
    builder(dir) -> (weights, inputs, extra args), modes)."""
    cs = []

    def add(name, keys, build, modes=("alone", "np3")):
        cs.append((name, keys, build, modes))

    def files(wmut=None, imut=None, meta=META, wname="w.safetensors", iname="i.safetensors"):
        def build(d):
            w, i = base()
            if wmut:
                wmut(w)
            if imut:
                imut(i)
            wp, ip = os.path.join(d, wname), os.path.join(d, iname)
            write(wp, w, meta)
            write(ip, i, None)
            return wp, ip, []
        return build

    def truncated(d):
        wp, ip, _ = files(wname="w_truncated.safetensors")(d)
        data = open(wp, "rb").read()
        raw(wp, data[:len(data) - 10])
        return wp, ip, []
    add("truncated weights file", ["w_truncated", "truncat", "short"], truncated)

    def header_lies(d):
        wp, ip, _ = files(wname="w_header.safetensors")(d)
        data = bytearray(open(wp, "rb").read())
        data[:8] = struct.pack("<Q", len(data) + 4096)
        raw(wp, bytes(data))
        return wp, ip, []
    add("header length past EOF", ["w_header", "header"], header_lies)

    def huge_header(d):
        wp, ip, _ = files(wname="w_hugeheader.safetensors")(d)
        data = bytearray(open(wp, "rb").read())
        data[:8] = struct.pack("<Q", 2**64 - 16)
        raw(wp, bytes(data))
        return wp, ip, []
    add("header length 2^64-16", ["w_hugeheader", "header"], huge_header)

    def garbage(d):
        wp, ip, _ = files()(d)
        wp = os.path.join(d, "w_json.safetensors")
        raw(wp, st.encode_raw(b'{"lm_head.weight": {"dtype": "BF16", "shape": [22, 8], "da', b"\0" * 64))
        return wp, ip, []
    add("JSON garbage", ["w_json", "json", "header"], garbage)

    def offsets_past_end(d):
        w, _ = base()
        wp, ip, _ = files()(d)
        hdr = {"__metadata__": META}
        data = b""
        for name, a in w.items():
            b = a.tobytes()
            hdr[name] = {"dtype": "BF16", "shape": list(a.shape),
                         "data_offsets": [len(data), len(data) + len(b)]}
            data += b
        hdr["markov_w2.weight"]["data_offsets"][1] += 64
        hdr["markov_w2.weight"]["data_offsets"][0] += 64
        wp = os.path.join(d, "w_offsets.safetensors")
        raw(wp, st.encode_raw(hdr, data))
        return wp, ip, []
    add("data offsets past the end", ["w_offsets", "markov_w2", "offset"], offsets_past_end)

    def f16(w):
        w["lm_head.weight"] = ref.f32(w["lm_head.weight"]).astype(np.float16)
    add("F16 lm_head", ["lm_head"], files(f16))

    def rank_mismatch(w):
        w["markov_w2.weight"] = harness.rand_bf16(np.random.default_rng(1), (VP, R + 2), 0.5)
    add("W1/W2 rank mismatch", ["markov_w"], files(rank_mismatch))

    def rows_mismatch(w):
        w["markov_w2.weight"] = w["markov_w2.weight"][:VP - 1].copy()
    add("W2 rows != lm_head rows", ["markov_w2", "lm_head"], files(rows_mismatch))

    add("missing markov_w2", ["markov_w2"], files(lambda w: w.pop("markov_w2.weight")))
    add("missing lm_head", ["lm_head"], files(lambda w: w.pop("lm_head.weight")))

    def wide(i):
        i["hidden"] = harness.rand_bf16(np.random.default_rng(2), (B, G, H + 1), 1.0)
    add("hidden width != lm_head width", ["hidden"], files(imut=wide))

    def hidden_f32(i):
        i["hidden"] = ref.f32(i["hidden"])
    add("hidden in F32", ["hidden"], files(imut=hidden_f32))

    def anchor_set(v):
        def m(i):
            i["anchor"] = np.array([0, v], np.int64)
        return m
    add("anchor = V (a padding row)", ["anchor"], files(imut=anchor_set(V)))
    add("anchor >= Vp", ["anchor"], files(imut=anchor_set(VP + 100)))
    add("anchor negative", ["anchor"], files(imut=anchor_set(-1)))
    add("anchor shape [B+1]", ["anchor"],
        files(imut=lambda i: i.__setitem__("anchor", np.array([0, 1, 2], np.int64))))
    add("missing anchor", ["anchor"], files(imut=lambda i: i.pop("anchor")))

    def temp_set(v):
        def m(i):
            i["temperature"] = np.array([0.5, v], np.float32)
        return m
    add("temperature negative", ["temperature"], files(imut=temp_set(-0.5)))
    add("temperature NaN", ["temperature"], files(imut=temp_set(np.nan)))
    add("temperature shape [B+1]", ["temperature"],
        files(imut=lambda i: i.__setitem__("temperature", np.array([0.5, 1, 1], np.float32))))

    add("vocab_size > rows", ["vocab"], files(meta={"vocab_size": str(VP + 1)}))
    add("vocab_size not a number", ["vocab"], files(meta={"vocab_size": "twenty"}))
    add("vocab_size 0", ["vocab"], files(meta={"vocab_size": "0"}))

    def missing_w(d):
        _, ip, _ = files()(d)
        return os.path.join(d, "no_such_weights.safetensors"), ip, []
    add("missing weights file", ["no_such_weights"], missing_w)

    def missing_i(d):
        wp, _, _ = files()(d)
        return wp, os.path.join(d, "no_such_inputs.safetensors"), []
    add("missing inputs file", ["no_such_inputs"], missing_i)

    def bad_path(d):
        wp, ip, _ = files()(d)
        return wp, ip, ["--path", "diagonal"]
    add("unknown --path", ["path"], bad_path)

    def bad_contract(d):
        wp, ip, _ = files()(d)
        return wp, ip, ["--contract", "fp16"]
    add("unknown --contract", ["contract"], bad_contract)

    add("temperature +inf", ["temperature"], files(imut=temp_set(np.inf)))

    def pos_set(v):
        def m(i):
            i["position"] = np.array([0, v], np.int64)
        return m
    add("position negative", ["position"], files(imut=pos_set(-3)))
    # slot k draws at position + 1 + k: past INT64_MAX - gamma that overflows
    add("position near INT64_MAX", ["position", "overflow"], files(imut=pos_set(2**63 - 2)))
    add("position shape [B+1]", ["position"],
        files(imut=lambda i: i.__setitem__("position", np.array([0, 1, 2], np.int64))))
    add("position F32", ["position"],
        files(imut=lambda i: i.__setitem__("position", np.array([0, 1], np.float32))))
    add("seed shape [B-1]", ["seed"], files(imut=lambda i: i.__setitem__("seed", np.array([4], np.int64))))
    add("seed F32", ["seed"], files(imut=lambda i: i.__setitem__("seed", np.array([4, 5], np.float32))))

    def w1_f16(w):
        w["markov_w1.weight"] = ref.f32(w["markov_w1.weight"]).astype(np.float16)
    add("F16 markov_w1", ["markov_w1"], files(w1_f16))

    def w1_rows(w):
        w["markov_w1.weight"] = w["markov_w1.weight"][:VP - 2].copy()
    add("W1 rows != lm_head rows", ["markov_w1", "lm_head"], files(w1_rows))

    def tiny_vocab(d):
        w, i = base()
        for k in list(w):
            w[k] = w[k][:2].copy()
        i["anchor"] = np.array([0, 1], np.int64)
        wp, ip = os.path.join(d, "w.safetensors"), os.path.join(d, "i.safetensors")
        write(wp, w, {"vocab_size": "2"})
        write(ip, i, None)
        return wp, ip, []
    add("TP 3 > padded vocabulary 2", ["TP size", "padded vocabulary"], tiny_vocab, modes=("np3",))

    def with_args(*args):
        def build(d):
            wp, ip, _ = files()(d)
            return wp, ip, list(args)
        return build
    add("--backend cuda (no GPU or no CUDA build)", ["cuda"], with_args("--backend", "cuda"), modes=("alone", "np3"))
    add("--backend tpu", ["--backend"], with_args("--backend", "tpu"))
    add("--tp 0", ["--tp"], with_args("--tp", "0"))
    add("--tp x", ["--tp"], with_args("--tp", "x"))
    # --tp N on the CPU runs N TP ranks as threads of one process; under mpirun too it is refused
    add("--tp 2 under mpirun", ["cannot also run under mpirun"], with_args("--tp", "2"), modes=("np3",))
    add("--broadcast maybe", ["--broadcast"], with_args("--broadcast", "maybe"))
    add("unknown option", ["--frobnicate"], with_args("--frobnicate"))

    def unwritable(d):
        wp, ip, _ = files()(d)
        return wp, ip, ["--out", os.path.join(d, "no_such_dir", "out.safetensors")]
    add("unwritable --out", ["--out", "no_such_dir"], unwritable)
    add("bad DSPARK_CUDA_TAIL", ["DSPARK_CUDA_TAIL"], with_args("ENV", "DSPARK_CUDA_TAIL=ring4"))
    return cs


def run_case(tally, wd, name, keys, build, mode):
    d = os.path.join(wd.path, "c%d" % tally.runs)
    os.makedirs(d)
    wp, ip, extra = build(d)
    out = os.path.join(d, "out.safetensors")
    label = "%s [%s]" % (name, mode)
    path, contract = None, None
    if "--path" in extra:
        path = extra[extra.index("--path") + 1]
    if "--contract" in extra:
        contract = extra[extra.index("--contract") + 1]
    env = None
    if "ENV" in extra:
        k, v = extra[extra.index("ENV") + 1].split("=", 1)
        env = {k: v}
        extra = [x for x in extra if x not in ("ENV", extra[extra.index("ENV") + 1])]
    if "--out" in extra:
        out = extra[extra.index("--out") + 1]
        extra = extra[:extra.index("--out")] + extra[extra.index("--out") + 2:]
    rest = [x for x in extra if x not in ("--path", "--contract", path, contract)]
    rc, so, se, dt = harness.run_head(wp, ip, out, np_=3 if mode == "np3" else 1, path=path,
                                      contract=contract, timeout=TIMEOUT, extra=rest, env=env)
    tally.runs += 1
    problems = []
    if rc is None:
        problems.append("no exit within %d s (hang)" % TIMEOUT)
    elif rc == 0:
        problems.append("exit 0")
    elif rc < 0:
        problems.append("killed by signal %d" % -rc)
    low = se.lower()
    if not any(k.lower() in low for k in keys):
        problems.append("stderr names none of %s" % keys)
    for f in FORBIDDEN:
        if f.lower() in low or f.lower() in so.lower():
            problems.append("output contains '%s'" % f)
    if os.path.exists(out):
        problems.append("an output file was written")
    first = next((ln for ln in se.splitlines() if ln.strip() and "----" not in ln), "")
    if problems:
        tally.fail("%s: %s; exit %s; stderr: %s" % (label, "; ".join(problems), rc,
                                                    se.strip()[-600:]))
    else:
        print("ok   %-34s exit %d in %.1fs: %s" % (label, rc, dt, first.strip()[:110]))
    return not problems


def tp_above_vocab_case(tally, wd):
    """TP size 3 > V = 2 is valid (DESIGN §3 eligibility): the sharded path is not
    eligible, the head falls back to the original path, says so on start-up,
    and gives the oracle's tokens and logits on every path."""
    w, i = base()
    d = os.path.join(wd.path, "tpv")
    os.makedirs(d)
    wp, ip = os.path.join(d, "w.safetensors"), os.path.join(d, "i.safetensors")
    write(wp, w, {"vocab_size": "2"})
    i["anchor"] = np.array([0, 1], np.int64)
    write(ip, i, None)
    want, want_lg = ref.head(w["lm_head.weight"], w["markov_w1.weight"], w["markov_w2.weight"],
                             2, i["hidden"], i["anchor"], i["temperature"], i["seed"], i["position"])
    for path in ("auto", "sharded", "original", "replicated"):
        label = "TP 3 > V = 2, --path %s" % path
        out = os.path.join(d, "o_%s.safetensors" % path)
        rc, so, se, dt = harness.run_head(wp, ip, out, np_=3, path=path, timeout=TIMEOUT)
        tally.runs += 1
        if rc != 0:
            tally.fail("%s: exit %s; stderr: %s" % (label, rc, se.strip()[-600:]))
            continue
        if path in ("auto", "sharded") and "not eligible" not in se:
            tally.fail("%s: the start-up line does not say the sharded path is not eligible: %s"
                       % (label, se.strip()[-300:]))
        got, _ = st.load(out)
        tally.tokens_eq(label, got["tokens"], want)
        tally.logits_eq(label, got["corrected_logits"], want_lg)
        print("ok   %s: tokens %s match the oracle" % (label, got["tokens"].tolist()))


def accepted_case(tally, wd):
    """Temperature given, seed absent: seed defaults to 0; not an error."""
    w, i = base()
    del i["seed"]
    d = os.path.join(wd.path, "ok")
    os.makedirs(d)
    wp, ip = os.path.join(d, "w.safetensors"), os.path.join(d, "i.safetensors")
    write(wp, w)
    write(ip, i, None)
    want, want_lg = ref.head(w["lm_head.weight"], w["markov_w1.weight"], w["markov_w2.weight"],
                             V, i["hidden"], i["anchor"], i["temperature"], None, i["position"])
    for np_ in (1, 3):
        label = "temperature without seed (seed 0) np%d" % np_
        got = harness.head_run(tally, wd, label, wp, ip, np_=np_)
        if got is not None:
            tally.tokens_eq(label, got[0], want)
            tally.logits_eq(label, got[1], want_lg)
            print("ok   %s: tokens %s" % (label, got[0].tolist()))


def main():
    harness.program()
    tally = harness.Tally()
    passed = total = 0
    with harness.Workdir() as wd:
        for name, keys, build, modes in case_list():
            for mode in modes:
                total += 1
                passed += run_case(tally, wd, name, keys, build, mode)
        accepted_case(tally, wd)
        tp_above_vocab_case(tally, wd)
    print("bad inputs: %d of %d handled cleanly" % (passed, total))
    return tally.finish("bad_inputs")


if __name__ == "__main__":
    sys.exit(main())
