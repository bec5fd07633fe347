#!/usr/bin/env bash
# dspark against llama.cpp on this CPU, in one call (bench/llama_peer.py says
# how the peer runs). Installs the peer on first use: llama-cpp-python from
# PyPI, built from source for this CPU (about 10 minutes on 2 cores), and gguf.
#   scripts/cpu_peer.sh calls    a random model, SHAPE mid (default; hidden 1024, 8 layers,
#                                vocabulary 32000) or qwen3-0.6b (the published shape:
#                                28 layers, vocabulary 151936, tied): decode, verify 8 and prefill at
#                                batch 1 and 4, bench_target --backend cpu against the peer
#                                (BF16 as dspark, and Q8_0), alternated (ROUNDS, default 3)
#   scripts/cpu_peer.sh generate the shipped target (and its draft): greedy decoding of
#                                make run's held-out prompt and of its batch of 16, dspark
#                                plain and speculative against the peer, the tokens compared
# BUILD (default build) holds dspark's release build; WORK (default a new temporary
# folder) the models and GGUFs.
set -euo pipefail
MODE=${1:-calls}
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
SHAPE=${SHAPE:-mid}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
if ! python3 -c "import llama_cpp, gguf" 2>/dev/null; then
  echo "cpu_peer: installing llama-cpp-python (built from source) and gguf"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --quiet "llama-cpp-python==0.3.36" "gguf>=0.17"
fi
[ -x "$BUILD/dspark" ] && [ -x "$BUILD/bench/bench_target" ] || { echo "cpu_peer: build $BUILD first (make build)" >&2; exit 1; }
lscpu | grep -E "^Model name|^CPU\(s\)" | tr -s ' '
python3 -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, '|', llama_cpp.llama_print_system_info().decode().strip())"

case "$MODE" in
calls)
  M="$WORK/$SHAPE"
  case "$SHAPE" in
  mid) SIZE=(--layers 8 --head-dim 64 --vocab 32000) ;;
  qwen3-0.6b) SIZE=(--layers 28 --head-dim 128 --vocab 151936 --tied --theta 1000000) ;;
  *) echo "cpu_peer: SHAPE is mid or qwen3-0.6b" >&2; exit 2 ;;
  esac
  [ -f "$M/config.json" ] || python3 tests/oracle/make_qwen3.py "$M" --hidden 1024 --intermediate 3072 \
    --heads 16 --kv-heads 8 "${SIZE[@]}" --seed 3 >/dev/null
  for r in $(seq "$ROUNDS"); do
    echo "== round $r"
    "$BUILD/bench/bench_target" --model "$M" --backend cpu --context 1024 --prefill 512 --batch 1,4 2>/dev/null | grep "^|"
    for ty in bf16 q8_0; do
      for fa in on off; do
        python3 bench/llama_peer.py --model "$M" --gguf "$WORK/${SHAPE}_$ty.gguf" --mode calls --context 1024 \
          --prefill 512 --batch 1,4 --flash-attn $fa --type $ty | grep "^|"
      done
    done
  done
  ;;
generate)
  T=models/kjv-target
  D=models/kjv-draft
  PROMPT=$(sed -n 20p models/heldout.txt)
  python3 - models/heldout.txt "$WORK/prompts.json" <<'PY'
import json, sys  # make run's batch: 16 held-out lines
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().splitlines() if len(l) > 60]
json.dump(lines[0:400:25], open(sys.argv[2], "w"))
PY
  ids() { python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$1"; }
  for r in $(seq "$ROUNDS"); do
    echo "== round $r"
    for in in one batch; do
      P=(--prompt "$PROMPT"); [ $in = batch ] && P=(--prompts "$WORK/prompts.json")
      "$BUILD/dspark" generate --model $T "${P[@]}" --max-new 128 --json 2>/dev/null | tail -1 >"$WORK/plain_$in.json"
      "$BUILD/dspark" generate --model $T --draft $D --gamma auto "${P[@]}" --max-new 128 --json 2>/dev/null |
        tail -1 >"$WORK/spec_$in.json"
      TEACH=(); [ $in = one ] && TEACH=(--teacher "$(ids "$WORK/plain_one.json")")
      for fa in on off; do
        python3 bench/llama_peer.py --model $T --gguf "$WORK/kjv.gguf" --mode generate "${P[@]}" --new 128 \
          --flash-attn $fa "${TEACH[@]}" >"$WORK/peer_${in}_$fa.json"
      done
    done
    python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
for run in ("one", "batch"):
    plain, spec, on, off = (json.load(open("%s/%s.json" % (w, n)))
                            for n in ("plain_" + run, "spec_" + run, "peer_%s_on" % run, "peer_%s_off" % run))
    what = "one prompt" if run == "one" else "%d prompts as one batch" % len(plain["results"])
    print("| %s: dspark plain | %.0f tok/s | ttft %.2f ms |" % (what, plain["tok_per_s"], plain["ttft_ms"]))
    print("| %s: dspark --draft --gamma auto | %.0f tok/s | acceptance length %.2f |"
          % (what, spec["tok_per_s"], spec["acceptance_length"]))
    for p in (on, off):
        print("| %s: llama.cpp bf16, flash-attn %s | %.0f tok/s | ttft %.2f ms |"
              % (what, p["flash_attn"], p["tok_per_s"], p["ttft_ms"]))
    same = "equal" if [r["tokens"] for r in plain["results"]] == [r["tokens"] for r in spec["results"]] else "DIFFER"
    free = sum(a["tokens"] == b["tokens"] for a, b in zip(plain["results"], off["results"]))
    line = "| %s: greedy tokens | dspark plain and speculative %s; llama.cpp's free run (flash-attn off) equal to " \
           "dspark's in %d of %d sequences" % (what, same, free, len(plain["results"]))
    if run == "one":
        line += "; llama.cpp's argmax teacher-forced on dspark's: %d of %d" % (on["teacher_forced_agree"],
                                                                             on["teacher_forced_of"])
    print(line + " |")
PY
  done
  ;;
*)
  echo "usage: scripts/cpu_peer.sh calls|generate" >&2
  exit 2
  ;;
esac
