#!/usr/bin/env bash
# dspark against llama.cpp on this CPU, in one call (bench/llama_peer.py says
# how the peer runs). Installs the peer on first use: llama-cpp-python from
# PyPI, built from source for this CPU (about 10 minutes on 2 cores), and gguf.
#   scripts/cpu_peer.sh calls    the mid-size random model (hidden 1024, 8 layers,
#                                vocabulary 32000): decode, verify 8 and prefill at
#                                batch 1, bench_target --backend cpu against the peer
#                                (BF16 as dspark, and Q8_0), alternated (ROUNDS, default 3)
#   scripts/cpu_peer.sh generate the shipped target (and its draft): greedy decoding of
#                                make run's held-out prompt, dspark plain and speculative
#                                against the peer, the tokens compared
# BUILD (default build) holds dspark's release build; WORK (default a new temporary
# folder) the models and GGUFs.
set -euo pipefail
MODE=${1:-calls}
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
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
  M="$WORK/mid"
  [ -f "$M/config.json" ] || python3 tests/oracle/make_qwen3.py "$M" --hidden 1024 --intermediate 3072 --layers 8 \
    --heads 16 --kv-heads 8 --head-dim 64 --vocab 32000 --seed 3 >/dev/null
  for r in $(seq "$ROUNDS"); do
    echo "== round $r"
    "$BUILD/bench/bench_target" --model "$M" --backend cpu --context 1024 --prefill 512 --batch 1 2>/dev/null | grep "^|"
    for ty in bf16 q8_0; do
      for fa in on off; do
        python3 bench/llama_peer.py --model "$M" --gguf "$WORK/mid_$ty.gguf" --mode calls --context 1024 \
          --prefill 512 --flash-attn $fa --type $ty | grep "^|"
      done
    done
  done
  ;;
generate)
  T=models/kjv-target
  D=models/kjv-draft
  PROMPT=$(sed -n 20p models/heldout.txt)
  for r in $(seq "$ROUNDS"); do
    echo "== round $r"
    "$BUILD/dspark" generate --model $T --prompt "$PROMPT" --max-new 128 --json 2>/dev/null | tail -1 >"$WORK/plain.json"
    "$BUILD/dspark" generate --model $T --draft $D --gamma auto --prompt "$PROMPT" --max-new 128 --json 2>/dev/null |
      tail -1 >"$WORK/spec.json"
    for fa in on off; do
      python3 bench/llama_peer.py --model $T --gguf "$WORK/kjv.gguf" --mode generate --prompt "$PROMPT" --new 128 \
        --flash-attn $fa --teacher "$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' \
        "$WORK/plain.json")" >"$WORK/peer_$fa.json"
    done
    python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
plain, spec, peer, peer_off = (json.load(open("%s/%s.json" % (w, n))) for n in ("plain", "spec", "peer_on", "peer_off"))
same = 0
for a, b in zip(plain["tokens"], peer["tokens"]):
    if a != b:
        break
    same += 1
print("| dspark plain | %.0f tok/s | ttft %.2f ms |" % (plain["tok_per_s"], plain["ttft_ms"]))
print("| dspark --draft --gamma auto | %.0f tok/s | acceptance length %.2f |" % (spec["tok_per_s"], spec["acceptance_length"]))
for p in (peer, peer_off):
    print("| llama.cpp bf16, flash-attn %s | %.0f tok/s | ttft %.2f ms |" % (p["flash_attn"], p["tok_per_s"], p["ttft_ms"]))
print("| greedy tokens | dspark plain and speculative %s; llama.cpp's free run equal to dspark's for the first %d "
      "of %d; llama.cpp's argmax teacher-forced on dspark's: %d of %d |"
      % ("equal" if plain["tokens"] == spec["tokens"] else "DIFFER", same, len(plain["tokens"]),
         peer["teacher_forced_agree"], peer["teacher_forced_of"]))
PY
  done
  ;;
*)
  echo "usage: scripts/cpu_peer.sh calls|generate" >&2
  exit 2
  ;;
esac
