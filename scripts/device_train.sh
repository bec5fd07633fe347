#!/usr/bin/env bash
# On the GPU machine: DSpark drafts for the shipped target (models/kjv-target) trained side by side with
# scripts/train_pair.py, each returned as $OUT/draft_NAME.tgz (a kjv-draft directory) with its log. Their
# acceptance is then measured here on the CPU (`dspark generate --draft DIR`), timing-free.
#   scripts/device_train.sh "NAME:LAYERS:RANK[:FROM]" ...
# FROM: a directory holding kjv-draft to continue (the carried path; omitted: a fresh draft), and the target it
# drafts for when it holds a kjv-target (else TARGET_DIR's, default models/). At most three
# variants (the returned files: 8 at most). BUDGET (seconds a variant's whole run, default 540: its pool of
# target continuations, then training until 0.9 of it) and ARGS (train_pair.py's other flags) apply to every
# variant.
# The bible-kjv text travels as out/verses.txt (`bible -m 8192 Gen1:1-Rev22:21 > out/verses.txt` here; carry
# "out").
set -u
if [ $# -lt 1 ] || [ $# -gt 3 ]; then echo "usage: scripts/device_train.sh NAME:LAYERS:RANK[:FROM] (one to three)" >&2; exit 2; fi
[ -f out/verses.txt ] || { echo "device_train: out/verses.txt missing (carry \"out\")" >&2; exit 2; }
OUT=${OUT:-/tmp/dspark_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
for v in "$@"; do
  IFS=: read -r name layers rank from <<< "$v"
  src=/tmp/src_$name
  tdir=${TARGET_DIR:-models}
  [ -n "$from" ] && [ -d "$from/kjv-target" ] && tdir=$from
  mkdir -p "$src" && cp -r "$tdir/kjv-target" "$src/"
  if [ -n "$from" ]; then cp -r "$from/kjv-draft" "$src/"; fresh=""; else fresh="--fresh"; fi
  # shellcheck disable=SC2086  # ARGS and fresh are lists of flags
  python3 scripts/train_pair.py "/tmp/tr_$name" --finetune "$src" $fresh --draft-layers "$layers" \
    --markov-rank "$rank" --verses out/verses.txt --budget "${BUDGET:-540}" \
    ${ARGS:---draft-steps 60000 --batch 64 --pool 8192 --lr 2e-3 --decay 4 --tv 0.9 --blocks 3,7 --bf16 --seed 7} \
    > "$OUT/train_$name.log" 2>&1 &
done
wait
for v in "$@"; do
  name=${v%%:*}
  echo "== $name: $(grep -E "budget|generated" "$OUT/train_$name.log" | tr '\n' ' ')"
  tail -2 "$OUT/train_$name.log"
  [ -f "/tmp/tr_$name/kjv-draft/model.safetensors" ] && tar -czf "$OUT/draft_$name.tgz" -C "/tmp/tr_$name" kjv-draft
done
