#!/usr/bin/env python3
"""The peer for the KDA operation: flash-linear-attention's Triton kernels
(fla-core, `fla.ops.kda`) at Kimi-Linear's heads (32 of 128 x 128), timed on
the GPU the way a serving engine calls them: `fused_recurrent_kda` for decode
(one token per sequence, states read and written in place, q/k L2-normalised
in the kernel), eagerly and replayed from a CUDA graph, and `chunk_kda` for a
prefill at batch 1, eagerly. Prints a table with the state- and
activation-byte floor at the copy rate measured in the same run, the same
floor test_ops' `kda op` rows print.

Those rows time the recurrence alone on q, k, v, g and beta already made.
dspark's op (bench_kda) also does the short convolution with SiLU, the gate,
beta and the gated output norm, so the "whole op" rows time what fla's own KDA
layer (fla/layers/kda.py) runs for the same work: a causal conv (update at
decode) with SiLU for each of q, k and v, the recurrence with the gate and
beta's sigmoid inside the kernel, and the sigmoid-gated RMSNorm. That is the
peer a user would run instead of dspark's op.

  fla_peer_kda.py [--decode 1,32,256] [--prefill 4096,16384] [--compare FILE]

--compare FILE checks dspark's outputs against fla's on the same inputs: FILE
is `bench_kda --dump`'s case (a prefill of 1024 tokens from a random state and
conv window, then one decode step). The conv + SiLU, the gate, beta and the
gated norm are rebuilt here in torch from the layer's formulas
(tests/oracle/kda_ref.py has them in numpy), with dspark's bf16 roundings
between stages, and fla's `chunk_kda` then `fused_recurrent_kda` run the
recurrence; the table gives the relative RMS of each difference.

fla-core and einops are not in the device image: download their wheels into
.whl/ (pip download --no-deps, py3-none-any), carry .whl, and pip install them
with --target into a directory on PYTHONPATH before running this."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_graph import capture  # noqa: E402


def copy_rate():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    best = 1e30
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        best = min(best, e0.elapsed_time(e1) * 1e-3)
    return 2.0 * n / best


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return sorted(times)[2]


def inputs(B, T, H=32, K=128, V=128, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, T, H, K, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, T, H, K, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, T, H, V, device="cuda", dtype=torch.bfloat16, generator=g)
    gate = -torch.nn.functional.softplus(torch.randn(B, T, H, K, device="cuda", generator=g)).float()
    beta = torch.sigmoid(torch.randn(B, T, H, device="cuda", generator=g)).to(torch.bfloat16)
    return q, k, v, gate, beta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decode", default="1,32,256")
    ap.add_argument("--prefill", default="4096,16384")
    ap.add_argument("--compare", default=None, help="a bench_kda --dump file")
    a = ap.parse_args()
    try:
        from fla.ops.kda import chunk_kda, fused_recurrent_kda
    except ImportError as e:
        print("flash-linear-attention (fla-core) is not importable here: %s" % e)
        return 1
    H, K, V = 32, 128, 128
    bw = copy_rate()
    print("# fla-core KDA peer on %s: copy %.0f GB/s" % (torch.cuda.get_device_name(), bw * 1e-9))
    print("| call | fla ms (eager) | fla ms (CUDA graph) | floor ms |")
    print("|---|---|---|---|")
    for B in [int(x) for x in a.decode.split(",") if x]:
        try:
            decode_row(B, H, K, V, bw, fused_recurrent_kda)
        except Exception as e:  # report and go on to the next row
            print("| decode, batch %d | failed: %s | | |" % (B, str(e).splitlines()[0][:120]))
    for T in [int(x) for x in a.prefill.split(",") if x]:
        try:
            prefill_row(T, H, K, V, bw, chunk_kda)
        except Exception as e:
            print("| prefill, batch 1 of %d tokens | failed: %s | | |" % (T, str(e).splitlines()[0][:120]))
    for B in [int(x) for x in a.decode.split(",") if x]:
        try:
            op_row(B, 1, H, K, bw, fused_recurrent_kda)
        except Exception as e:
            print("| whole op, decode, batch %d | failed: %s | | |" % (B, str(e).splitlines()[0][:120]))
    for T in [int(x) for x in a.prefill.split(",") if x]:
        try:
            op_row(1, T, H, K, bw, chunk_kda)
        except Exception as e:
            print("| whole op, prefill of %d tokens | failed: %s | | |" % (T, str(e).splitlines()[0][:120]))
    if a.compare:
        return compare(a.compare, chunk_kda, fused_recurrent_kda)
    return 0


def rel(a, b):
    return (torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double()).clamp_min(1e-300)).item()


def compare(path, chunk_kda, fused_recurrent_kda):
    """dspark's dumped case against fla on the same inputs (see the module text)."""
    from safetensors import safe_open
    F = torch.nn.functional
    with safe_open(path, framework="pt", device="cuda") as fh:
        meta = fh.metadata()
        t = {name: fh.get_tensor(name) for name in fh.keys()}
    T1, H, K, eps = int(meta["prefill_tokens"]), int(meta["heads"]), int(meta["head_dim"]), float(meta["eps"])
    HK, T = H * K, T1 + 1
    qkv, w = t["qkv"].float(), t["conv_w"].float()
    W = w.shape[1]
    xp = torch.cat([t["conv_state"].float(), qkv])  # the window's W-1 inputs, then the tokens
    acc = torch.zeros_like(qkv)
    for j in range(W):
        acc += xp[j:j + T] * w[:, j]
    y = F.silu(acc).to(torch.bfloat16)  # dspark's conv output is bf16
    q, k, v = (y[:, i * HK:(i + 1) * HK].reshape(1, T, H, K) for i in range(3))
    f = t["f"].float().reshape(T, H, K) + t["dt_bias"].float().reshape(H, K)
    g = (-torch.exp(t["A_log"].float().reshape(H, 1)) * F.softplus(f)).reshape(1, T, H, K).contiguous()
    beta = torch.sigmoid(t["b"].float()).reshape(1, T, H).contiguous()
    s0 = t["state0"].float().reshape(1, H, K, K).contiguous()
    note = ""
    try:
        o1, s1 = chunk_kda(q[:, :T1], k[:, :T1], v[:, :T1], g[:, :T1], beta[:, :T1], initial_state=s0,
                           output_final_state=True, use_qk_l2norm_in_kernel=True)
    except Exception:  # an fla that wants beta in the inputs' dtype
        beta, note = beta.to(torch.bfloat16), " (beta passed to fla in bf16)"
        o1, s1 = chunk_kda(q[:, :T1], k[:, :T1], v[:, :T1], g[:, :T1], beta[:, :T1], initial_state=s0,
                           output_final_state=True, use_qk_l2norm_in_kernel=True)
    o2, s2 = fused_recurrent_kda(q[:, T1:], k[:, T1:], v[:, T1:], g[:, T1:], beta[:, T1:], initial_state=s1,
                                 output_final_state=True, use_qk_l2norm_in_kernel=True)
    o = torch.cat([o1, o2], dim=1).to(torch.bfloat16).float().reshape(T, H, K)
    z = t["z"].float().reshape(T, H, K)
    ref = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + eps) * t["norm_w"].float().reshape(K) * torch.sigmoid(z)
    ours = t["y"].float().reshape(T, H, K)
    print("# dspark (bench_kda --dump) against fla on the same inputs%s: relative RMS" % note)
    print("| compared | relative RMS |")
    print("|---|---|")
    print("| y, %d prefill tokens (chunked) | %.2e |" % (T1, rel(ours[:T1], ref[:T1])))
    print("| y, the decode token (recurrent) | %.2e |" % rel(ours[T1:], ref[T1:]))
    print("| state after the prefill | %.2e |" % rel(t["state_prefill"].float().reshape(1, H, K, K), s1.float()))
    print("| state after the decode token | %.2e |" % rel(t["state_decode"].float().reshape(1, H, K, K), s2.float()))
    return 0


def decode_row(B, H, K, V, bw, fused_recurrent_kda):
    q, k, v, g, beta = inputs(B, 1)
    q, k, v, g, beta = (t.reshape(1, B, *t.shape[2:]) for t in (q, k, v, g, beta))
    h0 = torch.randn(B, H, K, V, device="cuda") * 0.1
    cu = torch.arange(B + 1, device="cuda", dtype=torch.long)

    def step():
        return fused_recurrent_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                   use_qk_l2norm_in_kernel=True, cu_seqlens=cu)

    eager = median_ms(step, 20)
    graph, _ = capture(step)
    replay = median_ms(graph.replay, 20)
    nbytes = B * (2 * H * K * V * 4) + B * (2 * H * K + H * V + H) * 2 + B * H * K * 4 + B * H * V * 2
    print("| decode, batch %d | %.4f | %.4f | %.4f |" % (B, eager, replay, nbytes / bw * 1e3))


def prefill_row(T, H, K, V, bw, chunk_kda):
    q, k, v, g, beta = inputs(1, T)

    def pre():
        return chunk_kda(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)

    eager = median_ms(pre, 3)
    nbytes = T * (2 * H * K + H * V + H) * 2 + T * H * K * 4 + T * H * V * 2 + H * K * V * 4
    print("| prefill, batch 1 of %d tokens | %.4f | — | %.4f |" % (T, eager, nbytes / bw * 1e3))


def op_row(B, T, H, K, bw, kda, W=4):
    """fla's KDA layer's op for B sequences of T tokens (T 1: decode through the conv update and the
    recurrent kernel; else one sequence, the conv and chunk_kda), the gate and beta in the kernel."""
    from fla.modules.causal_conv1d import causal_conv1d, causal_conv1d_update
    from fla.modules.norm.fused_norm_gate import rms_norm_gated
    g = torch.Generator(device="cuda").manual_seed(1)
    HK, N = H * K, B * T

    def rnd(*shape, dtype=torch.bfloat16, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).to(dtype)
    x = [rnd(N, HK) for _ in range(3)]  # the q, k and v projections' outputs
    w = [rnd(HK, W, scale=0.5) for _ in range(3)]
    cache = [rnd(B, HK, W) for _ in range(3)]
    f, b, z = rnd(1, N, H, K), rnd(1, N, H), rnd(1, N, H, K)
    A_log, dt_bias = rnd(H, dtype=torch.float32, scale=0.5), rnd(HK, dtype=torch.float32)
    norm_w = torch.ones(K, device="cuda", dtype=torch.bfloat16)
    h0 = torch.randn(B, H, K, K, device="cuda", generator=g) * 0.1
    cu = torch.arange(B + 1, device="cuda", dtype=torch.long) if T == 1 else None

    def step():
        if T == 1:
            qkv = [causal_conv1d_update(x=x[i], cache=cache[i], weight=w[i], activation="silu")[0] for i in range(3)]
        else:
            qkv = [causal_conv1d(x=x[i].view(1, T, HK), weight=w[i], activation="silu")[0] for i in range(3)]
        q, k, v = (t.view(1, N, H, K) for t in qkv)
        o, _ = kda(q, k, v, f, b, A_log=A_log, dt_bias=dt_bias, initial_state=h0, output_final_state=True,
                   use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                   cu_seqlens=cu)
        return rms_norm_gated(o, z, norm_w, None, activation="sigmoid", eps=1e-5)

    eager = median_ms(step, 20 if T == 1 else 3)
    replay = None
    if T == 1:
        graph, _ = capture(step)
        replay = median_ms(graph.replay, 20)
    # states and conv windows read and written; the q, k, v, f, b and z inputs read and y written
    nbytes = B * (2 * H * K * K * 4 + 2 * (W - 1) * 3 * HK * 2) + N * (3 * HK + HK + H + HK + HK) * 2
    name = "decode, batch %d" % B if T == 1 else "prefill, batch 1 of %d tokens" % T
    print("| whole op, %s | %.4f | %s | %.4f |" % (name, eager, "%.4f" % replay if replay else "—", nbytes / bw * 1e3))


if __name__ == "__main__":
    sys.exit(main())
