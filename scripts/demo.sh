#!/usr/bin/env bash
# `make run`: speculative decoding on the CPU with the shipped pair (models/:
# a small Qwen3 target and its DSpark draft, trained by scripts/train_pair.py
# on the King James Bible without Revelation): a held-out prompt from
# Revelation, its continuation, the acceptance length and the speedup over
# plain decoding of the same target measured in the same run, greedy (the
# tokens must equal plain decoding's; 4 drafts a round from blocks of 4 rows,
# which on a CPU pay more than the trained block of 7: fewer rows, most of its acceptance)
# and sampled at T 0.8 with 3 drafts a round from blocks of 3 rows (there the
# pair's acceptance length is about 2.5: 2 and 4 drafts measured less);
# then 16 held-out prompts one at a time as one user would send them (greedy,
# 4 drafts from blocks of 4, then T 0.8 with 3 from blocks of 3; one prompt's
# speedup varies with how well the draft knows it), and as a batch of 16,
# greedy, --gamma auto (as many drafts per round as pay on this CPU). The
# speedups depend on the CPU (bench/RESULTS.md: AMX tiles against the AVX-512 or AVX2 chain).
set -euo pipefail
BUILD=${1:-build}
D="$BUILD/dspark"
M=models
OUT="$BUILD/demo"
mkdir -p "$OUT"
PROMPT=$(sed -n 20p $M/heldout.txt)
python3 - "$M/heldout.txt" "$OUT/prompts.json" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().splitlines() if len(l) > 60]
json.dump(lines[0:400:25], open(sys.argv[2], "w"))
PY

echo "== the held-out prompt (Revelation, never trained on)"
echo "$PROMPT"
for T in 0 0.8; do
  GA=(--gamma 3 --draft-block gamma); [ $T = 0 ] && GA=(--gamma 4 --draft-block gamma)
  echo; echo "== dspark generate --model $M/kjv-target --draft $M/kjv-draft --max-new 128 --temperature $T ${GA[*]} --compare"
  "$D" generate --model $M/kjv-target --draft $M/kjv-draft --prompt "$PROMPT" --max-new 128 --temperature $T \
    ${GA[@]+"${GA[@]}"} --seed 1 --compare 2>"$OUT/stderr_$T.txt" | tee "$OUT/text_$T.txt"
  grep -v "^dspark: \(target\|draft\|markov\)\|^$" "$OUT/stderr_$T.txt" || true
  if [ $T = 0 ] && ! grep -q "the same tokens" "$OUT/stderr_$T.txt"; then
    echo "demo: speculative greedy output differs from plain greedy decoding" >&2; exit 1
  fi
done

echo; echo "== 16 held-out prompts one at a time (--max-batch 1), 128 new tokens each, greedy, 4 drafts from blocks of 4"
"$D" generate --model $M/kjv-target --draft $M/kjv-draft --prompts "$OUT/prompts.json" --max-batch 1 --max-new 128 \
  --gamma 4 --draft-block gamma --compare >/dev/null 2>"$OUT/stderr_one.txt"
grep "acceptance\|speedup" "$OUT/stderr_one.txt"
grep -q "the same tokens" "$OUT/stderr_one.txt" || { echo "demo: one-at-a-time output differs from plain decoding" >&2; exit 1; }

echo; echo "== the same 16 prompts one at a time, T 0.8, 3 drafts from blocks of 3"
"$D" generate --model $M/kjv-target --draft $M/kjv-draft --prompts "$OUT/prompts.json" --max-batch 1 --max-new 128 \
  --temperature 0.8 --seed 1 --gamma 3 --draft-block gamma --compare >/dev/null 2>"$OUT/stderr_one_t.txt"
grep "acceptance\|speedup" "$OUT/stderr_one_t.txt"

echo; echo "== a batch of 16 held-out prompts, 128 new tokens each, greedy, --gamma auto"
"$D" generate --model $M/kjv-target --draft $M/kjv-draft --prompts "$OUT/prompts.json" --max-new 128 --gamma auto --compare \
  >/dev/null 2>"$OUT/stderr_batch.txt"
grep "acceptance\|speedup\|tokens/s" "$OUT/stderr_batch.txt"
grep -q "the same tokens" "$OUT/stderr_batch.txt" || { echo "demo: batch output differs from plain decoding" >&2; exit 1; }
