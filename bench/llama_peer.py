"""The CPU peer: llama.cpp (through llama-cpp-python, built from source for
this CPU) on the same Qwen3 directory dspark runs, the program a CPU user
would run instead. scripts/cpu_peer.sh installs it and runs it beside
bench_target and `dspark generate` in one call.

The directory's BF16 safetensors become a BF16 GGUF (--gguf PATH) with
llama.cpp's Qwen3 tensor names; norms are widened to F32 (exact), as
llama.cpp's own converter stores them. The GGUF has no tokenizer
(tokenizer.ggml.model "none"): ids go in and ids come out, so both programs
see the same ids.

  --mode calls     ms per call at batch 1 over a context of C synthetic ids
                   (bench_target's: position i, (i * 7919 + 13) % vocab):
                   decode (1 new token, its logits) and verify (8 new tokens,
                   logits of each), the cache cut back to C after each call
                   (median of R); prefill of P ids (one call, logits of the
                   last).
  --mode generate  greedy decoding from --prompt-ids (or --prompt TEXT with the
                   directory's tokenizer.json, through the tokenizers package):
                   one JSON line with tokens, ttft_ms and tok_per_s (the rate
                   after the first token, as dspark generate reports it).
                   Stops at --new tokens or an end-of-sequence id of the config.
                   --teacher IDS: also how many of another program's greedy ids
                   are llama.cpp's argmax given the prompt and the ids before
                   them, in one forward (its decode steps round differently from
                   its longer calls, so free-running tokens part at near-ties).

usage: python3 bench/llama_peer.py --model DIR --gguf PATH --mode calls [--context 1024]
                                   [--prefill 512] [--reps 20] [--threads N] [--flash-attn on|off]
                                   [--type bf16|q8_0]
       python3 bench/llama_peer.py --model DIR --gguf PATH --mode generate
                                   (--prompt-ids 1,2,3 | --prompt TEXT) [--new 128]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import qwen3_ref  # noqa: E402  (reads config.json and the safetensors files)


def write_gguf(model, path, wtype="bf16"):
    """A GGUF of a Hugging Face Qwen3 directory in llama.cpp's names: the
    matrices BF16 as they are, or Q8_0 (llama.cpp's 8-bit blocks, what its
    CPU users often run: about half the bytes, not dspark's numbers)."""
    import gguf
    c = qwen3_ref.read_config(model)
    w = qwen3_ref.read_weights(model)
    L = c["num_hidden_layers"]
    wr = gguf.GGUFWriter(path, "qwen3")
    wr.add_context_length(c.get("max_position_embeddings", 4096))
    wr.add_embedding_length(c["hidden_size"])
    wr.add_block_count(L)
    wr.add_feed_forward_length(c["intermediate_size"])
    wr.add_head_count(c["num_attention_heads"])
    wr.add_head_count_kv(c["num_key_value_heads"])
    wr.add_key_length(c["head_dim"])
    wr.add_value_length(c["head_dim"])
    wr.add_rope_freq_base(float(c["rope_theta"]))
    wr.add_layer_norm_rms_eps(float(c["rms_norm_eps"]))
    wr.add_vocab_size(c["vocab_size"])
    wr.add_tokenizer_model("none")
    q8 = wtype == "q8_0"
    wr.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.MOSTLY_BF16)

    def put(name, a):
        if a.ndim == 1:
            wr.add_tensor(name, a.astype(np.float32))
        elif q8:
            t = gguf.GGMLQuantizationType.Q8_0
            wr.add_tensor(name, gguf.quants.quantize(a.astype(np.float32), t), raw_dtype=t)
        else:
            wr.add_tensor(name, np.ascontiguousarray(a).view(np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)

    put("token_embd.weight", w["model.embed_tokens.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(L):
        for hf, gg in names.items():
            put("blk.%d.%s.weight" % (i, gg), w["model.layers.%d.%s.weight" % (i, hf)])
    put("output_norm.weight", w["model.norm.weight"])
    if not c["tie_word_embeddings"]:
        put("output.weight", w["lm_head.weight"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return c


class Peer:
    """One llama.cpp context over the GGUF, driven through llama-cpp-python's
    thin wrappers of llama_decode, with the logits read in place."""

    def __init__(self, gguf_path, vocab, n_ctx, n_batch, threads, flash):
        import llama_cpp
        self.V = vocab
        self.llm = llama_cpp.Llama(model_path=gguf_path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=min(n_batch, 512),
                                   n_threads=threads, n_threads_batch=threads, flash_attn=flash,
                                   logits_all=False, verbose=False)

    def forward(self, ids, n_past, all_logits):
        """Appends ids at positions n_past.. and returns the argmax of each row
        with logits (every row, or the last)."""
        llm = self.llm
        llm._batch.set_batch(batch=list(ids), n_past=n_past, logits_all=all_logits)
        llm._ctx.decode(llm._batch)
        rows = len(ids) if all_logits else 1
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(rows * self.V,)).reshape(rows, self.V).argmax(1)

    def cut(self, n):
        self.llm._ctx.kv_cache_seq_rm(-1, n, -1)


def synth(lo, hi, V):
    return [(i * 7919 + 13) % V for i in range(lo, hi)]


def median_ms(fn, reps):
    fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def mode_calls(a, c):
    V, C, P = c["vocab_size"], a.context, a.prefill
    p = Peer(a.gguf, V, max(C + 8, P) + 8, max(C, P), a.threads, a.flash_attn == "on")
    for i in range(0, C, 512):  # the context, in llama.cpp's ubatch-sized calls
        p.forward(synth(i, min(C, i + 512), V), i, False)
    out = {}

    def call(n):
        p.forward(synth(C, C + n, V), C, n > 1)
        p.cut(C)

    out["decode_ms"] = median_ms(lambda: call(1), a.reps)
    out["verify8_ms"] = median_ms(lambda: call(8), a.reps)
    p.cut(0)

    def prefill():
        p.forward(synth(0, P, V), 0, False)
        p.cut(0)

    out["prefill_ms"] = median_ms(prefill, max(3, a.reps // 5))
    out.update(context=C, prefill=P, threads=a.threads, flash_attn=a.flash_attn, type=a.type)
    print("| llama.cpp %s %s, batch 1, context %d | decode %.3f ms | verify 8 %.3f ms | prefill %d %.1f ms |"
          % (a.type, a.flash_attn == "on" and "flash-attn" or "no flash-attn", C, out["decode_ms"], out["verify8_ms"], P,
             out["prefill_ms"]))
    print(json.dumps(out))


def mode_generate(a, c):
    V = c["vocab_size"]
    if a.prompt_ids:
        ids = [int(x) for x in a.prompt_ids.split(",")]
    else:
        from tokenizers import Tokenizer
        ids = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json")).encode(a.prompt).ids
    eos = c.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    gc = os.path.join(a.model, "generation_config.json")
    if os.path.exists(gc):
        g = json.load(open(gc)).get("eos_token_id")
        eos |= set(g if isinstance(g, list) else [g] if g is not None else [])
    n_teacher = len(a.teacher.split(",")) if a.teacher else 0
    n_ctx = len(ids) + max(a.new, n_teacher) + 8
    p = Peer(a.gguf, V, n_ctx, n_ctx if a.teacher else max(len(ids), 8), a.threads, a.flash_attn == "on")

    def run():
        p.cut(0)
        t0 = time.perf_counter()
        toks = [int(p.forward(ids, 0, False)[-1])]
        t1 = time.perf_counter()
        while len(toks) < a.new and toks[-1] not in eos:
            toks.append(int(p.forward([toks[-1]], len(ids) + len(toks) - 1, False)[-1]))
        return toks, (t1 - t0) * 1e3, time.perf_counter() - t1

    run()  # untimed, as dspark generate --compare warms up
    toks, ttft, dt = run()
    rate = (len(toks) - 1) / dt if dt > 0 else 0.0
    out = {"tokens": toks, "prompt_tokens": len(ids), "ttft_ms": ttft, "tok_per_s": rate,
           "threads": a.threads, "flash_attn": a.flash_attn}
    if a.teacher:  # another program's tokens, each checked against llama.cpp's argmax after its prefix
        want = [int(x) for x in a.teacher.split(",")]
        p.cut(0)
        got = p.forward(ids + want[:-1], 0, True)[len(ids) - 1:]
        out["teacher_forced_agree"] = int(sum(int(g) == w for g, w in zip(got, want)))
        out["teacher_forced_of"] = len(want)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--mode", choices=("calls", "generate"), required=True)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--flash-attn", choices=("on", "off"), default="on")
    ap.add_argument("--type", choices=("bf16", "q8_0"), default="bf16", help="the GGUF's matrices")
    ap.add_argument("--prompt-ids")
    ap.add_argument("--prompt")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--teacher", help="ids another program generated: report how many are llama.cpp's argmax "
                                      "given the prompt and the ids before them (one forward)")
    a = ap.parse_args()
    if a.mode == "generate" and not (a.prompt_ids or a.prompt):
        ap.error("--mode generate needs --prompt-ids or --prompt")
    c = write_gguf(a.model, a.gguf, a.type)
    (mode_calls if a.mode == "calls" else mode_generate)(a, c)


if __name__ == "__main__":
    main()
