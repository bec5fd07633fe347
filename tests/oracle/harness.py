"""What the drivers share: locating the program, running `dspark head` alone or
under mpirun, reading its output, random bf16 data, and counting comparisons."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import ref
import st

SKIP = 77
# Open MPI refuses root and more ranks than cores unless told (ctest sets these
# too; they are defaults here so a driver also runs by hand).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "OMPI_MCA_btl": "self,vader", "OMPI_MCA_mpi_yield_when_idle": "1",
}


def program():
    """(dspark, mpirun) from the environment; exits 77 (skipped) without them."""
    dspark = os.environ.get("DSPARK")
    mpirun = os.environ.get("MPIRUN") or shutil.which("mpirun")
    if not dspark or not os.path.exists(dspark):
        print("DSPARK is not set to the dspark program; skipped")
        sys.exit(SKIP)
    return dspark, mpirun


def cuda_or_skip():
    """Exits 77 (skipped) where `dspark info` sees no CUDA device."""
    rc, so, _, _ = run([program()[0], "info"])
    if rc != 0 or "cuda       not available" in so or "\ncuda" not in so:
        print("no CUDA device visible; skipped")
        sys.exit(SKIP)


# Lets the CUDA target run TP > 1 (refused without it until a machine with several GPUs has passed these tests).
CUDA_TP_ENV = {"DSPARK_CUDA_TP_UNVERIFIED": "1"}


def cuda_devices():
    """GPUs visible to this machine's processes (nvidia-smi -L), 0 without them."""
    try:
        so = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in so.splitlines() if line.startswith("GPU "))


def tp_sizes(backend, sizes):
    """The TP sizes of `sizes` this machine can run on `backend` (CUDA: one GPU per TP rank), and the
    environment they need; prints what is left out."""
    if backend != "cuda":
        return list(sizes), None
    n = cuda_devices()
    ok = [tp for tp in sizes if tp <= n]
    if len(ok) < len(sizes):
        print("TP %s on CUDA: not run (%d GPU%s visible)" % (
            ", ".join(str(tp) for tp in sizes if tp > n), n, "" if n == 1 else "s"))
    return ok, CUDA_TP_ENV


def run_cases(ctx, cases, only, name):
    """Runs the named cases (all without `only`) on ctx; its tally's verdict."""
    for case in only or cases:
        print("== %s" % case)
        sys.stdout.flush()
        cases[case](ctx)
    return ctx.tally.finish(name)


class Workdir:
    """A temporary directory removed on exit."""

    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="dspark-oracle-")
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)

    def file(self, name):
        return os.path.join(self.path, name)


def run_head(weights, inputs, out, np_=1, path=None, contract=None, broadcast=None,
             dump=False, extra=(), timeout=120, mpi=None, env=None):
    """Runs `dspark head`; under mpirun when np_ > 1 (or mpi=True).
    Returns (returncode, stdout, stderr, seconds); returncode None on timeout."""
    dspark, _ = program()
    args = [dspark, "head", "--weights", weights, "--inputs", inputs, "--out", out]
    if path:
        args += ["--path", path]
    if contract:
        args += ["--contract", contract]
    if broadcast:
        args += ["--broadcast", broadcast]
    if dump:
        args += ["--dump-logits"]
    args += list(extra)
    return run(args, np_=np_, timeout=timeout, mpi=mpi, env=env)


def run(args, np_=1, timeout=120, mpi=None, env=None, text=True):
    """Runs a command line; under mpirun when np_ > 1 (or mpi=True).
    Returns (returncode, stdout, stderr, seconds); returncode None on timeout;
    with text=False stdout and stderr are bytes."""
    if mpi or (mpi is None and np_ > 1):
        mpirun = os.environ.get("MPIRUN") or shutil.which("mpirun")
        args = [mpirun, "--oversubscribe", "-np", str(np_)] + list(args)
    extra_env = env or {}
    env = dict(MPI_ENV)
    env.update(os.environ)
    env.update(extra_env)
    # Open MPI's session directory per launch: two launches sharing one (ctest -j) can fail orte_init
    # ("orte_session_dir failed") when one removes it while the other starts
    session = tempfile.mkdtemp(prefix="dspark-ompi-")
    env["OMPI_MCA_orte_tmpdir_base"] = session
    try:
        return _run(args, env, timeout, text)
    finally:
        shutil.rmtree(session, ignore_errors=True)


def _run(args, env, timeout, text):
    t0 = time.time()
    # Its own process group, so a hang can be ended for mpirun and every rank.
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=text, start_new_session=True)
    try:
        so, se = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        so, se = p.communicate()
        return None, so, se, time.time() - t0
    return p.returncode, so, se, time.time() - t0


def save_weights(path, lm, w1, w2, vocab=None):
    meta = None if vocab is None else {"vocab_size": str(vocab)}
    st.save(path, {"lm_head.weight": lm, "markov_w1.weight": w1, "markov_w2.weight": w2}, meta)


def save_inputs(path, hidden, anchor, temperature=None, seed=None, position=None):
    t = {"hidden": hidden, "anchor": np.asarray(anchor, np.int64)}
    if temperature is not None:
        t["temperature"] = np.asarray(temperature, np.float32)
    if seed is not None:
        t["seed"] = np.asarray(seed, np.int64)
    if position is not None:
        t["position"] = np.asarray(position, np.int64)
    st.save(path, t)


def rand_bf16(rng, shape, scale):
    return ref.bf16(rng.standard_normal(shape) * scale)


def grid_bf16(rng, shape, lo, hi, step):
    """Small integers times a power of two: products and their sums are exact."""
    return ref.bf16(rng.integers(lo, hi + 1, size=shape).astype(np.float64) * step)


def same_bits(a, b):
    """Elementwise: identical bit patterns, or both NaN (payloads are free)."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return np.zeros(a.shape, bool)
    ui = np.uint16 if a.dtype.itemsize == 2 else np.uint32
    fa, fb = ref.f32(a), ref.f32(b)
    return (a.view(ui) == b.view(ui)) | (np.isnan(fa) & np.isnan(fb))


class Tally:
    """Counts compared tokens/logits and records mismatches with a label."""

    def __init__(self):
        self.tokens = 0
        self.token_bad = 0
        self.logits = 0
        self.logit_bad = 0
        self.runs = 0
        self.failures = []

    def fail(self, msg):
        self.failures.append(msg)
        print("FAIL: " + msg)

    def tokens_eq(self, label, got, want):
        self.tokens += want.size
        if got is None or got.shape != want.shape:
            self.token_bad += want.size
            self.fail("%s: tokens shape %s, want %s" % (
                label, None if got is None else got.shape, want.shape))
            return False
        bad = got != want
        n = int(bad.sum())
        self.token_bad += n
        if n:
            idx = np.argwhere(bad)[:5]
            self.fail("%s: %d token mismatches, first %s: got %s want %s" % (
                label, n, [tuple(i) for i in idx.tolist()],
                [int(got[tuple(i)]) for i in idx], [int(want[tuple(i)]) for i in idx]))
        return n == 0

    def logits_eq(self, label, got, want):
        self.logits += want.size
        if got is None or got.dtype != want.dtype or got.shape != want.shape:
            self.logit_bad += want.size
            self.fail("%s: corrected_logits %s %s, want %s %s" % (
                label, None if got is None else got.dtype, None if got is None else got.shape,
                want.dtype, want.shape))
            return False
        ok = same_bits(got, want)
        n = int((~ok).sum())
        self.logit_bad += n
        if n:
            idx = np.argwhere(~ok)[:5]
            self.fail("%s: %d logit mismatches, first %s: got %s want %s" % (
                label, n, [tuple(i) for i in idx.tolist()],
                [float(ref.f32(got[tuple(i)])) for i in idx],
                [float(ref.f32(want[tuple(i)])) for i in idx]))
        return n == 0

    def finish(self, name):
        print("%s: runs: %d, tokens compared: %d, mismatches: %d, logits compared: %d, "
              "mismatches: %d" % (name, self.runs, self.tokens, self.token_bad,
                                  self.logits, self.logit_bad))
        if self.failures:
            print("%s: FAILED (%d problems)" % (name, len(self.failures)))
            return 1
        print("%s: passed" % name)
        return 0


def head_run(tally, wd, label, weights, inputs, np_=1, want_logits=True, **kw):
    """Runs the head and returns (tokens, logits or None) or None on failure
    (recorded in tally)."""
    out = wd.file("out.safetensors")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se, dt = run_head(weights, inputs, out, np_=np_, **kw)
    tally.runs += 1
    if rc != 0:
        tally.fail("%s: exit %s after %.1fs; stderr: %s" % (label, rc, dt, se.strip()[-800:]))
        return None
    try:
        t, _ = st.load(out)
    except Exception as e:  # a malformed output is a failure of the program
        tally.fail("%s: output unreadable: %s" % (label, e))
        return None
    if "tokens" not in t:
        tally.fail("%s: output has no tokens (has %s)" % (label, sorted(t)))
        return None
    lg = t.get("corrected_logits")
    if want_logits and lg is None:
        tally.fail("%s: output has no corrected_logits" % label)
    return t["tokens"], lg
