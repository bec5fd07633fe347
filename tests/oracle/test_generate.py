#!/usr/bin/env python3
"""`dspark generate` on a tiny random Qwen3 checkpoint with a byte-level BPE
tokenizer.json (built with Hugging Face tokenizers), against the numpy
reference (qwen3_ref.py) and tokenizers itself.

Checked:
- prompts are encoded as tokenizers encodes them (plain and --chat);
- greedy ids are the reference's argmax at every step where its top two are
  clearly apart (tolerance as test_qwen3.py: the reference sums exactly, the
  C in fp32), teacher-forced on the C's own tokens (most steps are clear on
  this model; the check fails when half of them are not);
- generation stops at an end-of-sequence id of generation_config.json (and
  runs on with --ignore-eos), or after --max-new;
- text is tokenizers' decode(ids, skip_special_tokens=True), streamed or in
  --json;
- a batch of prompts (--prompts), chunked prefill (--max-tokens) and TP 2
  under mpirun give each prompt the ids it gets alone;
- sampling is reproducible from its seed, differs across seeds, and does not
  depend on the batch (prompt q of a batch draws with seed + q);
- bad requests exit non-zero with a message naming the problem."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tokenizer"))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import make_qwen3  # noqa: E402
import qwen3_ref  # noqa: E402
import ref  # noqa: E402

TOL_REL = 2.0 ** -6
EOS = [509, 507]  # <|im_end|>, <|endoftext|> in the tokenizer below
PROMPTS = ["The quick brown fox", "Über die Brücke gehen zwölf Männer, and then", "12 + 30 = 42; so"]


class T:
    def __init__(self, wd, backend=None):
        self.wd = wd
        self.backend = ["--backend", backend] if backend else []
        self.tally = harness.Tally()
        self.dspark, _ = harness.program()

    def gen(self, model, *args, np_=1, timeout=120, text=True):
        rc, so, se, _ = harness.run([self.dspark, "generate", "--model", model] + self.backend + list(args), np_=np_,
                                    timeout=timeout, text=text)
        self.tally.runs += 1
        return rc, so, se

    def gen_json(self, label, model, *args, np_=1):
        rc, so, se = self.gen(model, "--json", *args, np_=np_)
        if rc != 0:
            self.tally.fail("%s: exit %s: %s" % (label, rc, se.strip()[-500:]))
            return None
        try:
            lines = so.strip().splitlines()
            if len(lines) != 1:
                raise ValueError("%d lines" % len(lines))
            r = json.loads(lines[0])
            for key in ("tokens", "tok_per_s", "ttft_ms", "results"):
                if key not in r:
                    raise ValueError("no %r" % key)
            return r
        except ValueError as e:
            self.tally.fail("%s: stdout is not one JSON object (%s): %r" % (label, e, so[:300]))
            return None


def make_model(wd):
    from tokenizers import Tokenizer
    import make_tokenizer
    d = wd.file("model")
    make_qwen3.make(d, eos=EOS)
    tok = make_tokenizer.make_main(507, lines=3000)
    assert [a["id"] for a in tok["added_tokens"]] == [507, 508, 509, 510, 511]
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    return d, qwen3_ref.Qwen3.from_dir(d), Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def check_greedy(t, label, m, prompt_ids, ids, max_new, eos=EOS):
    """ids against the reference, teacher-forced on ids."""
    cache = m.new_cache()
    lg, _ = m.forward(cache, prompt_ids)
    row = lg[-1]
    unclear = 0
    for i, got in enumerate(ids):
        top2 = np.sort(row)[-2:]
        if top2[1] - top2[0] > 2 * TOL_REL * np.abs(row).max():
            want = ref.argmax(row)
            t.tally.tokens += 1
            if got != want:
                t.tally.token_bad += 1
                t.tally.fail("%s: step %d drew %d, the reference's argmax is %d" % (label, i, got, want))
                return
        else:
            unclear += 1
        if i + 1 < len(ids):
            row = m.forward(cache, [got])[0][-1]
    if unclear > len(ids) // 2:
        t.tally.fail("%s: %d of %d steps too close to call: the check says little" % (label, unclear, len(ids)))
    stopped = [i for i, x in enumerate(ids) if x in eos]
    if stopped and stopped[0] != len(ids) - 1:
        t.tally.fail("%s: went on after the end-of-sequence id at step %d" % (label, stopped[0]))
    if not stopped and len(ids) != max_new:
        t.tally.fail("%s: %d ids without an end-of-sequence id; --max-new was %d" % (label, len(ids), max_new))


def expect_fail(t, label, model, args, needle, code=None, np_=1):
    rc, so, se = t.gen(model, *args, np_=np_)
    if rc is None:
        t.tally.fail("%s: hung" % label)
    elif rc == 0:
        t.tally.fail("%s: accepted; it must be refused" % label)
    elif rc < 0 or rc > 128 or "Sanitizer" in se or "runtime error" in se:
        t.tally.fail("%s: crashed (exit %s): %s" % (label, rc, se.strip()[-300:]))
    elif code is not None and rc != code:
        t.tally.fail("%s: exit %s, want %s" % (label, rc, code))
    elif needle.lower() not in se.lower():
        t.tally.fail("%s: message does not name %r: %s" % (label, needle, se.strip()[-300:]))
    elif so.strip():
        t.tally.fail("%s: printed output before failing: %r" % (label, so[:200]))
    else:
        print("refused as it should (%s): %s" % (label, se.strip().splitlines()[-1][:160]))


def main():
    backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else None
    if backend == "cuda":
        harness.cuda_or_skip()
    with harness.Workdir() as wd:
        t = T(wd, backend)
        d, m, tk = make_model(wd)
        N = 24
        # greedy, one text prompt, against the reference and tokenizers
        alone = {}
        for i, p in enumerate(PROMPTS):
            r = t.gen_json("prompt %d" % i, d, "--prompt", p, "--max-new", str(N), "--ignore-eos")
            if r is None:
                continue
            res = r["results"][0]
            pid = tk.encode(p, add_special_tokens=False).ids
            if res["prompt_tokens"] != len(pid):
                t.tally.fail("prompt %d: %d prompt tokens, tokenizers gives %d" % (i, res["prompt_tokens"], len(pid)))
            check_greedy(t, "prompt %d" % i, m, pid, res["tokens"], N, eos=())
            want_text = tk.decode(res["tokens"], skip_special_tokens=True)
            if res["text"] != want_text:
                t.tally.fail("prompt %d: text %r, tokenizers decodes %r" % (i, res["text"], want_text))
            alone[i] = res["tokens"]
            if r["new_tokens"] != N or r["decode_calls"] != N - 1 or r["tokens"] != res["tokens"]:
                t.tally.fail("prompt %d: stats %s" % (i, r))
        # streaming prints the same text (bytes as they come, then a newline)
        rc, so, se = t.gen(d, "--prompt", PROMPTS[0], "--max-new", str(N), "--ignore-eos", text=False)
        if rc != 0 or 0 not in alone:
            t.tally.fail("streaming: exit %s: %s" % (rc, se[-300:]))
        elif so.decode("utf-8", "replace") != tk.decode(alone[0], skip_special_tokens=True) + "\n":
            t.tally.fail("streaming: %r, want %r" % (so, tk.decode(alone[0], skip_special_tokens=True)))
        # ids in, ids out; the same ids as the text prompt
        if 1 in alone:
            pid = tk.encode(PROMPTS[1], add_special_tokens=False).ids
            rc, so, se = t.gen(d, "--prompt-ids", ",".join(map(str, pid)), "--max-new", str(N), "--ignore-eos", "--ids")
            got = [int(x) for x in so.split()] if rc == 0 else None
            t.tally.tokens_eq("--prompt-ids --ids", np.array(got), np.array(alone[1]))
        # stop at an end-of-sequence id: make the id drawn at step 5 one
        if 0 in alone:
            k = next(i for i in range(3, N) if alone[0][i] not in alone[0][:i])
            d2 = wd.file("model-eos")
            os.makedirs(d2)
            for f in os.listdir(d):
                os.symlink(os.path.join(d, f), os.path.join(d2, f))
            os.remove(os.path.join(d2, "generation_config.json"))
            make_qwen3.write_json(os.path.join(d2, "generation_config.json"), {"eos_token_id": [alone[0][k], 507]})
            r = t.gen_json("eos", d2, "--prompt", PROMPTS[0], "--max-new", str(N))
            if r is not None:
                res = r["results"][0]
                if res["tokens"] != alone[0][:k + 1] or res["finish"] != "eos":
                    t.tally.fail("eos at step %d: got %s (%s), want %s" % (k, res["tokens"], res["finish"], alone[0][:k + 1]))
            r = t.gen_json("ignore-eos", d2, "--prompt", PROMPTS[0], "--max-new", str(N), "--ignore-eos")
            if r is not None and (r["results"][0]["tokens"] != alone[0] or r["results"][0]["finish"] != "length"):
                t.tally.fail("--ignore-eos: %s" % r["results"][0])
        # a batch, with chunked prefill, and TP 2: each prompt's ids as alone
        pf = wd.file("prompts.json")
        ids_prompt = tk.encode(PROMPTS[2], add_special_tokens=False).ids
        json.dump([PROMPTS[0], PROMPTS[1], ids_prompt], open(pf, "w"))
        runs = [("batch", [], 1), ("batch, prefill in calls of 4", ["--max-tokens", "4"], 1)]
        if backend != "cuda":  # the CUDA target runs TP 1 only so far
            runs.append(("batch, TP2", [], 2))
        for label, extra, np_ in runs:
            r = t.gen_json(label, d, "--prompts", pf, "--max-new", str(N), "--ignore-eos", *extra, np_=np_)
            if r is None:
                continue
            for i, res in enumerate(r["results"]):
                if i in alone:
                    t.tally.tokens_eq("%s: prompt %d" % (label, i), np.array(res["tokens"]), np.array(alone[i]))
            if extra and r["prefill_calls"] < 2:
                t.tally.fail("%s: %d prefill calls" % (label, r["prefill_calls"]))
        # --chat: Qwen3's user turn and assistant prompt, as tokenizers encodes it
        r = t.gen_json("chat", d, "--prompt", "hi there", "--chat", "--no-think", "--max-new", "4", "--ignore-eos")
        want = tk.encode("<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
                         add_special_tokens=False).ids
        if r is not None:
            if r["results"][0]["prompt_tokens"] != len(want) or want[0] != 508:
                t.tally.fail("chat: %d prompt tokens, want %d" % (r["results"][0]["prompt_tokens"], len(want)))
            check_greedy(t, "chat", m, want, r["results"][0]["tokens"], 4, eos=())
        # sampling
        s5 = [t.gen_json("sample seed 5 #%d" % i, d, "--prompt", PROMPTS[0], "--max-new", str(N), "--ignore-eos",
                         "--temperature", "0.9", "--seed", "5") for i in range(2)]
        s6 = t.gen_json("sample seed 6", d, "--prompt", PROMPTS[0], "--max-new", str(N), "--ignore-eos",
                        "--temperature", "0.9", "--seed", "6")
        pf2 = wd.file("prompts2.json")
        json.dump([PROMPTS[1], PROMPTS[0]], open(pf2, "w"))
        sb = t.gen_json("sample batch", d, "--prompts", pf2, "--max-new", str(N), "--ignore-eos",
                        "--temperature", "0.9", "--seed", "5")
        if None not in s5 and s6 is not None and sb is not None:
            a, b, c = s5[0]["results"][0]["tokens"], s5[1]["results"][0]["tokens"], s6["results"][0]["tokens"]
            t.tally.tokens_eq("sampling: same seed twice", np.array(b), np.array(a))
            # prompt q of a batch draws with seed + q: index 1 at seed 5 is the prompt alone at seed 6
            t.tally.tokens_eq("sampling: in a batch", np.array(sb["results"][1]["tokens"]), np.array(c))
            if a == c:
                t.tally.fail("sampling: seeds 5 and 6 drew the same %d tokens" % N)
            if a == alone.get(0):
                t.tally.fail("sampling at T=0.9 drew the greedy tokens")
        # bad requests
        bad = wd.file("bad.json")
        nodir = wd.file("no-tokenizer")
        os.makedirs(nodir)
        for f in ("config.json", "generation_config.json", "model.safetensors"):
            os.symlink(os.path.join(d, f), os.path.join(nodir, f))
        expect_fail(t, "no --model", d, ["--model"], "--model", code=2)
        expect_fail(t, "two prompt sources", d, ["--prompt", "a", "--prompt-ids", "1"], "exactly one", code=2)
        expect_fail(t, "--max-new 0", d, ["--prompt", "a", "--max-new", "0"], "--max-new", code=2)
        expect_fail(t, "negative temperature", d, ["--prompt", "a", "--temperature", "-1"], "--temperature", code=2)
        expect_fail(t, "--chat with ids", d, ["--prompt-ids", "1,2", "--chat"], "--chat", code=2)
        expect_fail(t, "unknown option", d, ["--prompt", "a", "--top-k", "5"], "--top-k", code=2)
        expect_fail(t, "bad ids", d, ["--prompt-ids", "1,x"], "--prompt-ids")
        expect_fail(t, "id past the vocabulary", d, ["--prompt-ids", "1,512", "--ids"], "vocabulary")
        expect_fail(t, "text without tokenizer.json", nodir, ["--prompt", "a"], "tokenizer.json")
        expect_fail(t, "past max_position_embeddings", d, ["--prompt", "a", "--max-new", "5000"],
                    "max_position_embeddings")
        for label, text, needle in (("prompts not JSON", "[\"a\",", bad), ("prompts empty", "[]", "1 .. 4096"),
                                    ("prompt of another type", "[\"a\", {\"x\": 1}]", "prompt 1"),
                                    ("prompt with a bad id", "[[1, -2]]", "entry 1")):
            open(bad, "w").write(text)
            expect_fail(t, label, d, ["--prompts", bad, "--ids"], needle)
        if backend != "cuda":  # one GPU: the CUDA target runs one rank
            expect_fail(t, "no such model, 2 ranks", wd.file("nowhere"), ["--prompt-ids", "1", "--ids"], "nowhere",
                        np_=2)
        expect_fail(t, "broken tokenizer.json", nodir, ["--prompt", "a"], "tokenizer.json") \
            if open(os.path.join(nodir, "tokenizer.json"), "w").write("{\"model\": 3}") else None
        return t.tally.finish("test_generate")


if __name__ == "__main__":
    sys.exit(main())
