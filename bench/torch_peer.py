"""PyTorch peer of the CUDA Markov head benchmark: the original (full-vocabulary,
greedy) path as a PyTorch user would write it, eager and captured in a CUDA
graph, timed with CUDA events (medians of rounds of replays), with the card's
copy bandwidth and bf16 matrix rate measured in the same process.

usage: python3 bench/torch_peer.py [--batch 32 --gamma 7 --vocab 163840
       --rank 256 --hidden 7168 --rounds 5 --replays 40] [--json OUT.json]
       [--merge CUDA.json]   (print one table with bench_cuda_head's numbers)
"""
import argparse
import json
import statistics

import torch


def timed(fn, replays, rounds, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    per_round = []
    for _ in range(rounds):
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        per_round.append(statistics.median(a.elapsed_time(b) for a, b in ev))
    return statistics.median(per_round)


def main():
    ap = argparse.ArgumentParser()
    for name, dflt in (("batch", 32), ("gamma", 7), ("vocab", 163840), ("rank", 256), ("hidden", 7168),
                       ("rounds", 5), ("replays", 40)):
        ap.add_argument("--" + name, type=int, default=dflt)
    ap.add_argument("--json")
    ap.add_argument("--merge")
    a = ap.parse_args()
    B, G, V, R, H = a.batch, a.gamma, a.vocab, a.rank, a.hidden
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    # ceilings: a 1 GiB device copy (read + write bytes) and an 8192^3 bf16 product on random data
    src = torch.randint(0, 255, (1 << 30,), dtype=torch.uint8, device=dev, generator=gen)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), 10, 3)
    res["copy_TBps"] = 2 * src.numel() / (t * 1e-3) / 1e12
    del src, dst
    x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=gen)
    y = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=gen)
    t = timed(lambda: x @ y, 10, 3)
    res["gemm_TFLOPs"] = 2 * 8192 ** 3 / (t * 1e-3) / 1e12
    del x, y

    hidden = torch.rand(B, G, H, device=dev, generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
    lm = torch.rand(V, H, device=dev, generator=gen).mul_(2).sub_(1).mul_(H ** -0.5).to(torch.bfloat16)
    w1 = torch.rand(V, R, device=dev, generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
    w2t = torch.rand(R, V, device=dev, generator=gen).mul_(2).sub_(1).mul_(R ** -0.5).to(torch.bfloat16)
    anchor = torch.randint(0, V, (B,), device=dev, generator=gen)

    def lm_head():
        return (hidden.view(B * G, H) @ lm.t()).view(B, G, V)

    def tail(base, prev):
        out = []
        for k in range(G):
            logits = base[:, k] + w1[prev] @ w2t  # bf16 product, bf16 add (fp32 sum, one rounding)
            prev = logits.argmax(-1)              # first maximum; NaN is the maximum
            out.append(prev)
        return torch.stack(out, 1)

    def full():
        return tail(lm_head(), anchor)

    base0 = lm_head()
    eager_tokens = full()
    res["lm_head_eager_ms"] = timed(lm_head, a.replays, a.rounds)
    res["tail_eager_ms"] = timed(lambda: tail(base0, anchor), a.replays, a.rounds)
    res["full_eager_ms"] = timed(full, a.replays, a.rounds)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            full()
            tail(base0, anchor)
    torch.cuda.current_stream().wait_stream(side)
    g_full, g_tail = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_full):
        graph_tokens = full()
    with torch.cuda.graph(g_tail):
        tail(base0, anchor)
    g_full.replay()
    torch.cuda.synchronize()
    res["graph_matches_eager"] = bool(torch.equal(graph_tokens, eager_tokens))
    res["full_graph_ms"] = timed(g_full.replay, a.replays, a.rounds)
    res["tail_graph_ms"] = timed(g_tail.replay, a.replays, a.rounds)
    res["peak_memory_GiB"] = torch.cuda.max_memory_allocated() / 2 ** 30

    bw, fl = res["copy_TBps"] * 1e12, res["gemm_TFLOPs"] * 1e12
    lm_bytes = V * H * 2 + B * G * H * 2 + B * G * V * 2
    res["floor_lm_ms"] = max(lm_bytes / bw, 2 * B * G * H * V / fl) * 1e3
    res["floor_tail_ms"] = G * (R * V * 2 + B * R * 2) / bw * 1e3
    res["floor_full_ms"] = res["floor_lm_ms"] + res["floor_tail_ms"]
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if a.merge:
        with open(a.merge) as f:
            c = json.load(f)
        print()
        print(f"one table, {res['device']}, batch {B}, gamma {G}, vocab {V}, rank {R}, hidden {H} "
              f"(CUDA events, medians; the two programs ran one after the other in this call)")
        print(f"ceilings: torch copy {res['copy_TBps']:.2f} TB/s, bf16 {res['gemm_TFLOPs']:.0f} TFLOP/s | "
              f"dspark copy {c['copy_TBps']:.2f} TB/s, bf16 {c['gemm_TFLOPs']:.0f} TFLOP/s")
        print(f"{'implementation':<42} {'full ms':>9} {'tail ms':>9} {'full/floor':>11} {'tail/floor':>11}")
        ff, ft = c["floor_full_ms"], c["floor_tail_ms"]
        rows = [("PyTorch eager (original path)", res["full_eager_ms"], res["tail_eager_ms"]),
                ("PyTorch CUDA graph (original path)", res["full_graph_ms"], res["tail_graph_ms"])]
        rows += [("dspark " + k, v["full_ms"], v["tail_ms"]) for k, v in c["variants"].items()]
        rows.append(("dspark sampling variant (T=0.8)", c["sampling"]["full_ms"], c["sampling"]["tail_ms"]))
        for name, f_ms, t_ms in rows:
            print(f"{name:<42} {f_ms:9.3f} {t_ms:9.3f} {f_ms / ff:11.2f} {t_ms / ft:11.2f}")
        print(f"{'floors (dspark ceilings)':<42} {ff:9.3f} {ft:9.3f}")
        print(f"dspark tokens: {c['tokens_compared']} compared across variants, {c['mismatches']} mismatches")


if __name__ == "__main__":
    main()
