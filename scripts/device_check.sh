#!/bin/bash
# On a GPU machine (through the device tool), from the repository root, in two
# calls that each fit the tool's 10-minute limit:
#   scripts/device_check.sh build   build this tree (build-gpu) and, when .old/
#                                   holds an earlier tree (git archive), that one
#                                   (build-old) for a side-by-side benchmark
#   scripts/device_check.sh run     the GPU tests (ctest -L gpu: the CUDA head, NCCL,
#                                   the op-parity harness), compute-sanitizer on two
#                                   head tests, the op harness's perf table, CLI
#                                   parity (strict CUDA == CPU byte for byte, the
#                                   paths alike)
#   scripts/device_check.sh bench   bench_cuda_head old / new / old / new in one call
#   scripts/device_check.sh target  the Qwen3 target on CUDA: its oracle tests, the
#                                   numpy reference against transformers, then a
#                                   random checkpoint of a published shape (SHAPE,
#                                   default qwen3-1.7b) with bench_target against
#                                   the transformers peer
#   scripts/device_check.sh attn    one call for a change to the attention kernels: build this tree and, when .old/
#                                   holds an earlier one, its test_ops_cpu and bench_spec; t_attention, racecheck on
#                                   it, the CUDA model tests; the op harness's attention table old / new twice;
#                                   bench_spec old / new twice on a random Qwen3-8B pair (ROUND_NCU=1 first: ncu's time
#                                   of every kernel of short bench_spec runs, batch 1 and 32; batch 32 needs NCU_TIMEOUT
#                                   about 300; NCU_BATCHES the batches, "1 32"); DETAIL=ncu kernel filter
#                                   adds one instance's sections and hottest SASS lines; SAN=0 no racecheck, ATT_ROUNDS
#                                   the attention tables' rounds (2; 0: none)
#   scripts/device_check.sh gemm    one call for a change to the GEMM: build, the product
#                                   tests (test_ops t_gemm*, test_cuda_head), the op
#                                   harness's perf table with DSPARK_GEMM_SPLIT 0 and 1,
#                                   then bench_spec on a random Qwen3-8B pair (SPLIT_SPEC,
#                                   default "0 1")
#   scripts/device_check.sh gsmall  one call for a change to the few-row GEMM (gemm_small.cu): build this tree
#                                   and, when .old/ holds an earlier one, its bench_gemm_small and bench_spec; the
#                                   few-row kernel forced through t_gemm_rows (and under memcheck), bench_gemm_small
#                                   old / new (SHAPES: C:SB:ST triples), the CUDA model tests, bench_spec old / new
#                                   on a random Qwen3-8B pair
#   scripts/device_check.sh decode  one call for the target's decode step: build, the product and
#                                   fused-op tests, the CUDA model tests, bench_target on a random
#                                   Qwen3-8B (VARIABLE=values, default DSPARK_GEMM_SMALL="auto 0",
#                                   one run per value), then ncu's per-kernel times of one batch-1
#                                   step summarized by scripts/ncu_step.py; DETAIL=kernel adds one instance's
#                                   sections and hottest SASS lines (scripts/ncu_source.py)
#   scripts/device_check.sh kda     one call for a change to the KDA kernels: build this tree and, when .old/ holds an
#                                   earlier one, its bench_kda (PREBUILT=1: both from build-cuda/pre.tgz); t_kda
#                                   (also under racecheck and memcheck), the CUDA KDA layer and view tests; bench_kda old / new twice (RUNS: extra "VAR=value"
#                                   runs of this tree, twice, with RUN_ARGS, default decode only); PASSES=1: ncu's
#                                   durations of both chunked passes at 16384 tokens, PASSES=2 of every kernel of one call; fla's peer rows when .whl/ holds its wheels; DETAIL=ncu
#                                   kernel filter adds one instance's sections, its hottest SASS lines and every
#                                   line's counts (detail_src.csv.gz), on bench_kda at decode batch DECODE or with
#                                   BENCH_ARGS (e.g. "--decode '' --prefill 4096" for the chunked passes)
#   scripts/device_check.sh parity  the CLI parity step of run alone (a build of dspark and synth first)
#   scripts/device_check.sh verify  build, parity, t_attention (and under racecheck, memcheck), t_layers, the CUDA
#                                   model tests; per DSPARK_CUDA_ATTENTION value (VALUES, default "fp32 tc") bench_target on the
#                                   shipped target and the shipped pair's figures; ncu's kernels of one batch-16
#                                   decode and verify forward (STEPS: the selections they follow); when .old/ holds an
#                                   earlier tree, the op harness's attention table old / new twice
#   scripts/device_check.sh attcmp  the op harness's attention tables of .old/ and this tree (twice), then one attention
#                                   launch (DETAIL: ncu kernel filter, SKIP launches) of the shipped target's batch-16
#                                   decode in detail: sections and hottest SASS lines
#   scripts/device_check.sh prefill one attention launch of a 1024-row context forward in detail (ncu sections and hottest
#                                   SASS lines; a 2-layer model at Qwen3-8B's shapes; CONTEXT rows, SKIP launches)
#   scripts/device_check.sh rows    the many-row attention kernel (tc; tc-long for long caches): the hardware bf16
#                                   rounding's check, t_attention* under tc and tc-long and racecheck, the op harness's
#                                   attention tables (prefill, context 8192) of .old and this tree twice (when .old/
#                                   holds an earlier tree) and with tc-long, one prefill launch in detail (ncu), and
#                                   bench_target's prefill 2048 on a random Qwen3-8B: .old / this tree twice, else
#                                   tc-one-row / tc twice
#   scripts/device_check.sh lean    one short call without .old: test_cuda_mathf, t_attention* (tc, tc-long, fp32), t_gemm*,
#                                   bench_target's prefill 2048 on a random Qwen3-8B with the tile at 224 and auto, twice
#                                   (BT), then the op harness's attention and product tables (PT: DSPARK_GEMM_TILE auto,
#                                   224 and 256); PREBUILT=1 unpacks build-cuda/pre.tgz (build-gpu/ and, for an A/B,
#                                   build-old/ binaries built for sm_90a on the CPU machine: scripts/prebuild.sh) instead of
#                                   building; BB: bench_target's batches (1), BT_PREFILL its prefill (2048; it also sets the
#                                   cache's length); BT, PT and ATT_FORMS entries may be VAR=value settings;
#                                   TESTS=0 skips the checks (all: the whole test_ops_cpu cuda instead), ROUNDS=0 the
#                                   attention tables; SPEC=1 adds bench_spec on a random Qwen3-8B pair (SPEC_ROUNDS);
#                                   NCU_STEP=1 ncu's kernel times of one batch-1 decode step, DETAIL=filter one launch in
#                                   bench_target at each DETAIL_BATCH (1) after SKIP launches;
#                                   ATT_ENV / SPEC_ENV: VAR=value settings the attention tables / bench_spec run under, each
#                                   in turn (ATT_LINES: the table lines shown); TESTS=att: only t_attention* (ATT_FORMS); SAN=att: racecheck on t_attention
#   scripts/device_check.sh h200    the H200 goals of issues 16-19 in one call: bench_kda and fla's peer, bench_target
#                                   (and .old's first, when it holds an earlier tree) and bench_spec on a random Qwen3-8B pair, the PyTorch graph peers of the target
#                                   step and the draft proposal (PEERS=0 skips the peers), the shipped pair (SHIP=0)
#   scripts/device_check.sh slices  CUDA's K slices of o and down (TP invariance, issue 20 on one GPU); PART=test: the
#                                   product tests (t_gemm*, t_gemm_slices under memcheck), the CUDA model oracles, the
#                                   token parity of device_multi.sh on this machine's GPUs; PART=bench: their cost,
#                                   bench_target and bench_spec on a random Qwen3-8B pair with DSPARK_TP_INVARIANT 0 / 1
#                                   alternated (ROUNDS, default 2). PREBUILT=1 as h200's. The tests run with
#                                   DSPARK_TP_INVARIANT=1, without which CUDA's models keep one sum over K
#   scripts/device_check.sh noise   one call for the sampled Markov tail's noise buffer (DSPARK_CUDA_NOISE): build,
#                                   test_cuda_head (its sampling case runs both forms) and its sampling case under
#                                   memcheck, the draft and speculative oracles with the buffer on, then bench_spec at
#                                   T 0.8 (TEMP) with DSPARK_CUDA_NOISE 1 and 0, greedy gamma 3 with the draft's
#                                   full block and blocks of 3 rows, then greedy
#   scripts/device_check.sh chain   the kernel boundary's price (bench_chain: dependent steps alone, then chains of eight
#                                   few-row products as a graph of kernels and as one persistent kernel, bits compared);
#                                   the few-row products' bits (t_gemm_rows, t_gemm_slices) and, where build-old/ holds
#                                   an earlier tree, bench_gemm_small old / new alternated (ROUNDS, default 2);
#                                   test_cuda_nccl (P = 1 on one GPU). PREBUILT=1 as h200's
# Logs go to $OUT (at most 8 files); the summary is printed last.
# env: SAN=0 skips compute-sanitizer (run: also ctest's racecheck cases), rows: ROUNDS of tables (2), LONG=0 / NCU=0 skip tc-long's table / the ncu launch, BENCH=0 the benchmarks, PERF=0 the op perf table, SHIP=0 run's shipped-pair
# figures (CUDA, batch 1 and 16)
set -u
MODE=${1:-run}
source scripts/device_env.sh

# The earlier tree in .old/ (git archive) built into build-old: its targets "$@" (the log in build_old.log).
build_old() {
  (cd .old && mkdir -p .devdeps && cp ../.devdeps/*.deb .devdeps/ 2>/dev/null;
   { cmake -S . -B ../build-old -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
     cmake --build ../build-old -j16 --target "$@"; } > "$OUT/build_old.log" 2>&1)
}

if [ "$MODE" = build ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv > "$OUT/info.txt" 2>&1
  stamp "configure + build (this tree)"
  # every target: `run`'s ctest -L gpu needs each GPU test's binaries and drivers (a list here went stale)
  if ! { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
         cmake --build build-gpu -j16; } > "$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
  fi
  if [ -d .old ]; then
    stamp "configure + build (.old)"
    build_old bench_cuda_head || { tail -30 "$OUT/build_old.log"; echo "OLD BUILD FAILED"; }
  fi
  stamp "built"; exit 0
fi

# bench_spec on a random Qwen3-8B target and draft, once per value $2.. of the variable $1 (TEMP: a temperature;
# KEEP=1 keeps the pair for the next call)
spec_pair() {
  local var=$1; shift
  [ -d /tmp/d8 ] || { python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b &&
    python3 bench/hf_peer_target.py --make-draft /tmp/t8 /tmp/d8; } > /dev/null 2>&1 || { echo "make failed"; return 1; }
  for v in "$@"; do
    stamp "bench_spec, $var=$v"
    env "$var=$v" timeout 150 build-gpu/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda \
      --context 1024 --batch 1,32 ${TEMP:+--temperature $TEMP} 2>&1 | grep -E "^\|" | head -14
  done
  [ "${KEEP:-0}" = 1 ] || rm -rf /tmp/t8 /tmp/d8
}

# The random Qwen3-8B pair in the background (/tmp/made once written), this tree's build (CUDA_FLAGS: extra nvcc
# flags) and, when .old/ holds an earlier tree, that tree's targets "$@"; B: the builds to compare.
pair_and_builds() {
  rm -f /tmp/made
  ( { python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b &&
      python3 bench/hf_peer_target.py --make-draft /tmp/t8 /tmp/d8; } > "$OUT/make.log" 2>&1; echo made > /tmp/made ) &
  stamp "configure + build"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release ${CUDA_FLAGS:+-DCMAKE_CUDA_FLAGS=$CUDA_FLAGS} &&
    cmake --build build-gpu -j16; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  B="gpu"
  if [ -d .old ]; then
    stamp "configure + build (.old)"
    build_old "$@" && B="old gpu" || { tail -20 "$OUT/build_old.log"; echo "OLD BUILD FAILED"; }
  fi
}

# The CUDA model tests (and those matching $1, when given) through ctest: their summary lines.
model_tests() {
  (cd build-gpu && timeout 300 ctest -R "${1:+$1|}oracle_qwen3_cuda|oracle_dspark_cuda|oracle_speculative_cuda|oracle_shipped_cuda|oracle_generate_cuda" \
    --output-on-failure) > "$OUT/ctest.log" 2>&1
  grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -6
}

# The Markov head through the CLI: strict CUDA against the CPU byte for byte, the CUDA paths alike, a bad setting refused.
cli_parity() {
  D=build-gpu/dspark
  build-gpu/bench/synth --weights /tmp/w.st --inputs /tmp/i.st --vocab 50000 --vocab-padded 50003 --hidden 1024 \
    --rank 256 --batch 12 --gamma 7 --seed 3 --sampled-every 3
  # the chain's order (AMX tiles, the default where the host has them, differ in a product's last bit: CONTRACTS §2)
  DSPARK_CPU_KERNEL=chain $D head --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_cpu.st --dump-logits
  DSPARK_CUDA_STRICT=1 $D head --backend cuda --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_strict.st --dump-logits
  cmp /tmp/o_cpu.st /tmp/o_strict.st && echo "PARITY strict CUDA == CPU (tokens and logits, byte-identical)"
  for p in original sharded replicated; do
    DSPARK_VERBOSE=1 $D head --backend cuda --path $p --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_g_$p.st \
      --dump-logits
  done
  cmp /tmp/o_g_original.st /tmp/o_g_sharded.st && cmp /tmp/o_g_original.st /tmp/o_g_replicated.st &&
    echo "PARITY CUDA paths byte-identical at TP1"
  DSPARK_CUDA_TAIL=5 $D head --backend cuda --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_bad.st; echo "bad tail rc=$?"
}

# The op harness's attention tables of the builds $1 (e.g. "old gpu"), alternated $2 times (2), every table kept in
# att.log; the lines shown match $3 (the decode, verify and draft rows).
att_tables() {
  for r in $(seq "${2:-2}"); do for b in $1; do
    stamp "op harness attention tables ($b, round $r)" | tee -a "$OUT/att.log"
    timeout 200 build-$b/tests/test_ops_cpu cuda perf attention 2>&1 | grep -A8 "^attention" | tee -a "$OUT/att.log" |
      grep -E "${3:-^(decode|verify|draft)}"
  done; done
}

# One launch of kernel $1 (an ncu filter on demangled names; $2 launches skipped first, $3 SASS lines shown) of the
# command after them in detail: the sections' key lines, then the hottest SASS lines.
ncu_detail() {
  local kn=$1 skip=$2 top=$3; shift 3
  ncu --graph-profiling node --cache-control none --clock-control none --import-source yes --kernel-name-base demangled \
    --kernel-name "$kn" --launch-skip "$skip" --launch-count 1 --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters -o "$OUT/detail" -f \
    "$@" > "$OUT/detail.err" 2>&1
  ncu -i "$OUT/detail.ncu-rep" --page details > "$OUT/detail.txt" 2>&1
  grep -E "Duration|Grid Size|Block Size|Cluster|Registers|Dynamic Shared|Achieved Occ|No Eligible|Memory Throughput|Warp Cycles|Stall" \
    "$OUT/detail.txt" | head -24
  ncu -i "$OUT/detail.ncu-rep" --page source --csv --print-source sass > "$OUT/detail_src.csv" 2>&1
  python3 scripts/ncu_source.py "$OUT/detail_src.csv" --top "$top"
  rm -f "$OUT/detail.ncu-rep"
}

# The shipped pair on CUDA, one prompt and the batch of 16 (a round's parts: where the batch's time goes).
shipped_pair() {
  stamp "shipped pair on CUDA: bench_target, generate at batch 1 and 16"
  timeout 60 build-gpu/bench/bench_target --model models/kjv-target --backend cuda --context 128 --prefill 256 \
    --batch 1,16 --reps 200 2>&1 | grep -E "^\|" | grep -v "^|---"
  python3 -c "import json; l=[x for x in open('models/heldout.txt').read().splitlines() if len(x) > 60]; \
json.dump(l[0:400:25], open('/tmp/prompts16.json', 'w'))"
  P=$(sed -n 20p models/heldout.txt)
  for G in 7 3 auto; do
    timeout 60 build-gpu/dspark generate --backend cuda --model models/kjv-target --draft models/kjv-draft \
      --prompt "$P" --max-new 128 --gamma $G --seed 1 --compare 2>&1 >/dev/null | grep -E "acceptance|speedup|tokens/s"
    timeout 60 build-gpu/dspark generate --backend cuda --model models/kjv-target --draft models/kjv-draft \
      --prompts /tmp/prompts16.json --max-new 128 --gamma $G --seed 1 --compare 2>&1 >/dev/null | grep -E "acceptance|speedup|tokens/s"
  done
}

SUMMARY=""
if [ "$MODE" = parity ]; then
  stamp "configure + build (dspark, synth)"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release && cmake --build build-gpu -j16 --target dspark_tool synth; } \
    > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  stamp "CLI parity: CPU (the chain) vs CUDA"
  cli_parity > "$OUT/parity.log" 2>&1
  grep -E "PARITY|rc=|differ" "$OUT/parity.log"
  stamp "done"; exit 0
fi
if [ "$MODE" = verify ]; then  # the shipped target's verify and the attention forms (DSPARK_CUDA_ATTENTION)
  stamp "configure + build"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-lineinfo &&
    cmake --build build-gpu -j16; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  stamp "CLI parity: CPU (the chain) vs CUDA"
  cli_parity > "$OUT/parity.log" 2>&1
  grep -E "PARITY|rc=|differ" "$OUT/parity.log"
  stamp "t_attention, racecheck and memcheck on it, the CUDA model tests"
  timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_attention > "$OUT/attention.log" 2>&1
  echo "t_attention: rc $?"; grep -E "differ|beyond|compared" "$OUT/attention.log" | head -4
  timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_layers > "$OUT/layers.log" 2>&1
  echo "t_layers: rc $?"; grep -E "differ|FAILED" "$OUT/layers.log" | head -4
  for tool in racecheck memcheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/tests/test_ops_cpu cuda "" t_attention \
      > "$OUT/att_$tool.log" 2>&1
    echo "$tool t_attention rc $?: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/att_$tool.log" | head -2)"
  done
  model_tests
  if [ -d .old ]; then  # an earlier tree's attention table against this one's, twice
    stamp "configure + build (.old: test_ops_cpu)"
    build_old test_ops_cpu || { tail -20 "$OUT/build_old.log"; echo "OLD BUILD FAILED"; }
    att_tables "old gpu"
  fi
  for v in ${VALUES:-fp32 tc}; do
    stamp "DSPARK_CUDA_ATTENTION=$v: bench_target on the shipped target at context 1024"
    export DSPARK_CUDA_ATTENTION=$v
    timeout 120 build-gpu/bench/bench_target --model models/kjv-target --backend cuda \
      --batch 1,16 2>&1 | grep "^|" | grep -v "^| call\|^|---"
    shipped_pair
  done
  unset DSPARK_CUDA_ATTENTION
  stamp "ncu: batch 16, 16 prefills, 5 decode and 5 verify forwards"
  ncu --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-count 6000 build-gpu/bench/bench_target --model models/kjv-target --backend cuda --batch 16 --reps 3 \
    > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  for st in ${STEPS:-17 22}; do echo "-- forward after selection $st"; python3 scripts/ncu_step.py "$OUT/ncu.csv" --step $st | cut -c1-110; done
  stamp "done"; exit 0
fi
if [ "$MODE" = attcmp ]; then  # the attention tables of .old and this tree, then one shipped-target instance in detail
  stamp "configure + build (test_ops_cpu, bench_target; .old's test_ops_cpu beside it)"
  build_old test_ops_cpu &
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-lineinfo &&
    cmake --build build-gpu -j8 --target test_ops_cpu bench_target; } > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  wait
  stamp "op perf, attention (old gpu, twice)"
  att_tables "old gpu"
  KN=${DETAIL:-regex:k_attention_tc}
  stamp "ncu: one $KN of the shipped target's batch-16 decode in detail"
  ncu_detail "$KN" ${SKIP:-140} 40 build-gpu/bench/bench_target --model models/kjv-target --backend cuda --batch 16 --reps 3
  stamp "done"; exit 0
fi
if [ "$MODE" = gemm ]; then
  stamp "configure + build"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
    cmake --build build-gpu -j16 --target test_ops_cpu test_cuda_head bench_spec; } > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  stamp "product tests"
  DSPARK_VERBOSE=1 timeout 90 build-gpu/tests/test_ops_cpu cuda "" "t_gemm*" > "$OUT/gemm_tests.log" 2>&1
  echo "test_ops t_gemm*: rc $?"; grep -E "gemm rows N|ERROR|FAILED|PASSED|resident" "$OUT/gemm_tests.log" | head -24
  timeout 120 build-gpu/tests/test_cuda_head > "$OUT/head_tests.log" 2>&1
  echo "test_cuda_head: rc $?"; grep -E "ERROR|FAILED|PASSED" "$OUT/head_tests.log" | head -8
  stamp "op perf table, split off and on"
  for sp in 0 1; do DSPARK_GEMM_SPLIT=$sp timeout 100 build-gpu/tests/test_ops_cpu cuda perf > "$OUT/perf_$sp.log" 2>&1; done
  grep "^perf" "$OUT"/perf_*.log
  paste -d'|' <(grep -E "^[0-9]+ x" "$OUT/perf_0.log") <(grep -E "^[0-9]+ x" "$OUT/perf_1.log" | cut -c29-)
  [ "${BENCH:-1}" = 1 ] || { stamp "done"; exit 0; }
  stamp "random Qwen3-8B target and draft"
  spec_pair DSPARK_GEMM_SPLIT ${SPLIT_SPEC-0 1} || exit 1
  stamp "done"; exit 0
fi
if [ "$MODE" = noise ]; then
  stamp "configure + build"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release && cmake --build build-gpu -j16; } \
    > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  stamp "test_cuda_head, its sampling case under memcheck"
  timeout 150 build-gpu/tests/test_cuda_head > "$OUT/head_tests.log" 2>&1
  echo "test_cuda_head: rc $?"; grep -E "ERROR|FAILED|PASSED|differ" "$OUT/head_tests.log" | head -8
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_cuda_head t_grid_sampling \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc $?: $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
  stamp "CUDA model tests with the noise buffer"
  DSPARK_CUDA_NOISE=1 model_tests
  stamp "random Qwen3-8B target and draft"
  KEEP=1 TEMP=${TEMP:-0.8} spec_pair DSPARK_CUDA_NOISE 1 0 || exit 1
  for blk in full gamma; do
    stamp "bench_spec, greedy, gamma 3, --draft-block $blk"
    timeout 150 build-gpu/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda --context 1024 \
      --batch 1,32 --gamma 3 --draft-block $blk 2>&1 | grep -E "^\|" | head -14
  done
  TEMP= spec_pair DSPARK_CUDA_NOISE 1 || exit 1
  stamp "done"; exit 0
fi
if [ "$MODE" = gsmall ]; then
  pair_and_builds bench_gemm_small bench_spec
  stamp "the few-row kernel forced: t_gemm_rows, then under memcheck"
  DSPARK_GEMM_SPLIT=0 DSPARK_GEMM_SMALL=1 timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_gemm_rows > "$OUT/rows.log" 2>&1
  echo "t_gemm_rows: rc $?"
  DSPARK_GEMM_SPLIT=0 DSPARK_GEMM_SMALL=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
    build-gpu/tests/test_ops_cpu cuda "" t_gemm_rows > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc $?: $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
  for b in $B; do
    stamp "bench_gemm_small ($b)"
    timeout 80 build-$b/bench/bench_gemm_small --m 1,8 ${SHAPES:+--shapes $SHAPES} 2>&1 | grep -v "^|---"
  done
  (cd build-gpu && timeout 200 ctest -R "test_ops_cuda$|test_ops_cuda_gemm_rows|oracle_qwen3_cuda|oracle_dspark_cuda|oracle_speculative_cuda|oracle_shipped_cuda" \
    --output-on-failure) > "$OUT/ctest.log" 2>&1
  grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -6
  while [ ! -f /tmp/made ]; do sleep 2; done
  for b in $B; do
    stamp "bench_spec ($b)"
    timeout 100 build-$b/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda --context 1024 --batch 1,32 2>&1 |
      grep -E "^\|" | grep -v "^|---" | head -14
  done
  rm -rf /tmp/t8 /tmp/d8
  stamp "done"; exit 0
fi
if [ "$MODE" = decode ]; then
  stamp "configure + build"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-lineinfo &&
    cmake --build build-gpu -j16 --target dspark dspark_tool test_ops_cpu target_driver draft_driver rollback_driver \
      tok_driver bench_target synth test_cuda_head; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  (python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b > "$OUT/make.log" 2>&1) &
  stamp "products and layer ops (the few-row kernel forced), CUDA model tests"
  DSPARK_GEMM_SPLIT=0 DSPARK_GEMM_SMALL=1 timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_gemm_rows > "$OUT/rows.log" 2>&1
  echo "t_gemm_rows (few-row kernel forced): rc $?"
  timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_layers > "$OUT/layers.log" 2>&1; echo "t_layers: rc $?"
  timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_attention > "$OUT/attention.log" 2>&1
  echo "t_attention: rc $?"; grep -E "differ|beyond|compared" "$OUT/attention.log" | head -4
  if [ "${SAN:-1}" = 1 ]; then
    timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_ops_cpu cuda "" t_attention \
      > "$OUT/att_memcheck.log" 2>&1
    echo "memcheck t_attention rc $?: $(grep -E "ERROR SUMMARY" "$OUT/att_memcheck.log")"
  fi
  model_tests
  if [ "${HEAD:-0}" = 1 ]; then
    timeout 150 build-gpu/tests/test_cuda_head > "$OUT/head_tests.log" 2>&1
    echo "test_cuda_head: rc $?"; grep -E "FAILED|PASSED" "$OUT/head_tests.log" | head -4
  fi
  wait
  VAR=${VARIABLE:-DSPARK_GEMM_SMALL}
  for v in ${VALUES:-auto 0}; do
    stamp "bench_target, $VAR=$v"
    env "$VAR=$v" timeout 150 build-gpu/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 --prefill 2048 \
      --batch 1,32 2>&1 | grep "^|" | grep -v "^| call\|^|---"
  done
  stamp "ncu: one batch-1 decode step"
  ncu --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-count 1400 build-gpu/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 --prefill 16 \
    --batch 1 --reps 3 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  python3 scripts/ncu_step.py "$OUT/ncu.csv" | cut -c1-110
  if [ -n "${DETAIL:-}" ]; then  # DETAIL=kernel base name: one decode instance (SKIP, default 40) in detail
    stamp "ncu: one $DETAIL in detail"
    ncu --graph-profiling node --cache-control none --clock-control none --import-source yes --kernel-name "$DETAIL" \
      --launch-skip ${SKIP:-40} --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section SourceCounters -o "$OUT/detail" -f \
      build-gpu/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 --prefill 16 --batch 1 --reps 3 \
      > "$OUT/detail.err" 2>&1
    ncu -i "$OUT/detail.ncu-rep" --page details > "$OUT/detail.txt" 2>&1
    grep -E "Duration|Grid Size|Block Size|Cluster|Registers|Shared Memory Config|Dynamic Shared|Achieved Occ|Theoretical Occ|Issued Ipc|No Eligible|Memory Throughput|Compute \(SM\)|Stall|Warp Cycles" "$OUT/detail.txt" | head -40
    ncu -i "$OUT/detail.ncu-rep" --page source --csv --print-source sass > "$OUT/detail_src.csv" 2>&1
    python3 scripts/ncu_source.py "$OUT/detail_src.csv" --top 40
    rm -f "$OUT/detail.ncu-rep"
  fi
  rm -rf /tmp/t8
  stamp "done"; exit 0
fi
if [ "$MODE" = attn ]; then
  CUDA_FLAGS=-lineinfo pair_and_builds test_ops_cpu bench_spec
  stamp "attention tests, racecheck, the CUDA model tests"
  timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_attention > "$OUT/attention.log" 2>&1; echo "t_attention: rc $?"
  if [ "${SAN:-1}" = 1 ]; then
    timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/tests/test_ops_cpu cuda "" t_attention \
      > "$OUT/racecheck.log" 2>&1
    echo "racecheck rc $?: $(grep -E "RACECHECK SUMMARY" "$OUT/racecheck.log")"
  fi
  model_tests attention_tc
  stamp "op perf, attention ($B, ${ATT_ROUNDS:-2} rounds)"
  att_tables "$B" "${ATT_ROUNDS:-2}"
  wait
  if [ "${ROUND_NCU:-0}" = 1 ]; then  # every kernel's time of short speculative runs, batch 1 and 32, in launch order
    stamp "bench_spec (no ncu)"
    timeout 100 build-gpu/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda --context 1024 --batch 1,32 2>&1 |
      grep -E "^\|" | grep -v "^|---" | head -9
    for b in ${NCU_BATCHES:-1 32}; do
      stamp "ncu: bench_spec batch $b"
      timeout ${NCU_TIMEOUT:-150} ncu --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum \
        --csv build-gpu/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda --context 1024 --batch $b \
        --new $([ $b = 1 ] && echo 6 || echo 3) > "$OUT/round_b$b.csv" 2> "$OUT/round_b$b.err"; echo "ncu rc $?"
      gzip -f "$OUT/round_b$b.csv"
    done
  fi
  [ "${BENCH:-1}" = 1 ] || { stamp "done"; exit 0; }
  for r in 1 2; do for b in $B; do
    stamp "bench_spec ($b)"
    timeout 150 build-$b/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda --context 1024 --batch 1,32 2>&1 |
      grep -E "^\|" | grep -v "^|---" | head -9
  done; done
  if [ -n "${DETAIL:-}" ]; then  # DETAIL=ncu kernel filter (e.g. "regex:k_attention_tc<2"), SKIP instances; BATCH of bench_target
    stamp "ncu: one $DETAIL in detail"
    ncu_detail "$DETAIL" ${SKIP:-40} 30 build-gpu/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 \
      --prefill 16 --batch ${BATCH:-1} --reps 3
  fi
  rm -rf /tmp/t8 /tmp/d8
  stamp "done"; exit 0
fi
if [ "$MODE" = kda ]; then
  B="gpu" built=0
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:/usr/local/cuda/lib
  # PREBUILT=1: build-cuda/pre.tgz from scripts/prebuild.sh (NEW_TARGETS "dspark_tool test_ops_cpu bench_kda
  # kda_layer_driver test_cuda_kda_views", OLD_TARGETS bench_kda); no build tree, so the tests run without ctest
  unpack_prebuilt && built=1 && [ -d build-old ] && B="old gpu"
  if [ "$built" = 0 ]; then
    CUDA_FLAGS=-lineinfo
    stamp "configure + build"
    { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=$CUDA_FLAGS &&
      cmake --build build-gpu -j16 --target dspark_tool test_ops_cpu bench_kda kda_layer_driver test_cuda_kda_views; } > "$OUT/build.log" 2>&1 ||
      { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
    if [ -d .old ]; then
      build_old bench_kda && B="old gpu" || { tail -20 "$OUT/build_old.log"; echo "OLD BUILD FAILED"; }
    fi
  fi
  if [ -d .whl ]; then
    (pip install --no-deps --target /tmp/pyfla .whl/*.whl > "$OUT/pip.log" 2>&1 || tail -3 "$OUT/pip.log") &
  fi
  stamp "t_kda, racecheck, memcheck, the layer and view tests"
  timeout 200 build-gpu/tests/test_ops_cpu cuda "" t_kda > "$OUT/kda.log" 2>&1; echo "t_kda: rc $?"
  for v in ${TEST_ENV:-}; do env "$v" timeout 200 build-gpu/tests/test_ops_cpu cuda "" t_kda >> "$OUT/kda.log" 2>&1; echo "t_kda $v: rc $?"; done
  for tool in $([ "${SAN:-1}" = 1 ] && echo racecheck memcheck); do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/tests/test_ops_cpu cuda "" t_kda \
      > "$OUT/san_$tool.log" 2>&1
    echo "$tool rc $?: $(grep -E "SUMMARY" "$OUT/san_$tool.log")"
  done
  if [ "$built" = 0 ]; then
    (cd build-gpu && timeout 300 ctest -R "oracle_kda_layer_cuda|test_cuda_kda_views" --output-on-failure) > "$OUT/ctest.log" 2>&1
    grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -4
  else
    timeout 60 build-gpu/tests/test_cuda_kda_views > "$OUT/ctest.log" 2>&1; echo "test_cuda_kda_views: rc $?"
    if [ -x build-gpu/tests/test_cuda_mathf ]; then  # the device expf's bits against the CPU's (carried when changed)
      timeout 120 build-gpu/tests/test_cuda_mathf >> "$OUT/ctest.log" 2>&1; echo "test_cuda_mathf: rc $?"
    fi
    DSPARK=$PWD/build-gpu/dspark timeout 240 python3 tests/oracle/test_kda_layer.py --driver build-gpu/tests/kda_layer_driver \
      --backend cuda >> "$OUT/ctest.log" 2>&1; echo "oracle_kda_layer (cuda): rc $?"
  fi
  wait
  stamp "bench_kda ($B, twice; then RUNS)"
  for r in 1 2; do for b in $B; do
    echo "== $b"; timeout 150 build-$b/bench/bench_kda --backend cuda 2>&1 | grep -E "^\| (decode|prefill)"
  done; done
  # RUNS: "VAR=value" runs of this tree, RUN_ARGS their bench_kda calls (default decode only; "--decode ''" for prefill),
  # twice, alternated
  eval "set -- ${RUN_ARGS:---prefill ''}"
  for r in 1 2; do for v in ${RUNS:-}; do
    echo "== gpu $v"; env "$v" timeout 150 build-gpu/bench/bench_kda --backend cuda "$@" 2>&1 | grep -E "^\| (decode|prefill)"
  done; done
  if [ "${PASSES:-0}" = 1 ]; then  # each chunked pass's duration at 16384 tokens (ncu, the second call's launches)
    stamp "ncu: the chunked passes at 16384 tokens"
    timeout 150 ncu --cache-control none --clock-control none --kernel-name regex:k_chunk_ --launch-skip 2 --launch-count 2 \
      --section SpeedOfLight --section WarpStateStats build-gpu/bench/bench_kda --backend cuda --decode '' --prefill 16384 \
      --reps 5 2>&1 | grep -E "k_chunk_|Duration|Warp Cycles Per Issued|Compute \(SM\) Throughput" | head -12
  fi
  if [ "${PASSES:-0}" = 2 ]; then  # every kernel of the first prefill calls at 16384 tokens (ncu, durations, DRAM bytes)
    stamp "ncu: every kernel of the first prefill calls at 16384 tokens (20 launches)"
    timeout 150 ncu --cache-control none --clock-control none --launch-count 20 \
      --metrics gpu__time_duration.sum,dram__bytes.sum build-gpu/bench/bench_kda --backend cuda --decode '' \
      --prefill 16384 --reps 5 2>&1 | grep -E "^  [a-zA-Z_].*\(|gpu__time_duration|dram__bytes" | head -60
  fi
  if [ -d /tmp/pyfla ]; then
    stamp "fla peer"
    PYTHONPATH=/tmp/pyfla timeout 300 python3 bench/fla_peer_kda.py > "$OUT/peer.log" 2>&1; grep -E "^\||^#" "$OUT/peer.log" | grep -v "^|---"
  fi
  if [ -n "${DETAIL:-}" ]; then
    # BENCH_ARGS: bench_kda's calls (default: decode at batch DECODE); "--decode '' --prefill 4096" for the passes
    stamp "ncu: one $DETAIL (bench_kda ${BENCH_ARGS:---decode ${DECODE:-256} --prefill ''})"
    eval "set -- ${BENCH_ARGS:---decode ${DECODE:-256} --prefill ''}"
    ncu --cache-control none --clock-control none --kernel-name-base demangled --kernel-name "$DETAIL" --launch-skip 3 \
      --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section SourceCounters --import-source yes -o "$OUT/detail" -f \
      build-gpu/bench/bench_kda --backend cuda "$@" > "$OUT/detail.err" 2>&1
    ncu -i "$OUT/detail.ncu-rep" --page details > "$OUT/detail.txt" 2>&1
    grep -E "Duration|Grid Size|Registers|Dynamic Shared|Achieved Occ|Theoretical Occ|Block Limit Reg|No Eligible|DRAM Throughput|Warp Cycles Per Issued|Stall" \
      "$OUT/detail.txt" | head -24
    ncu -i "$OUT/detail.ncu-rep" --page source --csv --print-source sass > "$OUT/detail_src.csv" 2>&1
    python3 scripts/ncu_source.py "$OUT/detail_src.csv" --top ${TOP:-40}
    gzip -f "$OUT/detail_src.csv"  # every SASS line's samples and counts: scripts/ncu_regions.py sums them by region
    rm -f "$OUT/detail.ncu-rep"
  fi
  stamp "done"; exit 0
fi
if [ "$MODE" = target ]; then
  export DSPARK=$PWD/build-gpu/dspark PYTHONUNBUFFERED=1
  stamp "target oracle tests on CUDA"
  (cd build-gpu && timeout 300 ctest -R "qwen3|generate" --output-on-failure) > "$OUT/target_tests.log" 2>&1
  grep -E "tests passed|Passed|Failed|Skipped|FAIL|test_qwen3:|test_generate:" "$OUT/target_tests.log" | head -20
  if [ "${REFHF:-1}" = 1 ]; then
    stamp "numpy reference against transformers"
    timeout 200 python3 tests/oracle/check_qwen3_hf.py > "$OUT/ref_hf.log" 2>&1; tail -12 "$OUT/ref_hf.log"
  fi
  [ "${BENCH:-1}" = 1 ] || { stamp "done"; exit 0; }
  SH=${SHAPE:-qwen3-8b}
  stamp "random $SH checkpoint"
  timeout 200 python3 bench/hf_peer_target.py --make /tmp/bench_$SH --shape $SH 2>&1 | tail -2
  stamp "bench_target (cuda)"
  timeout 150 build-gpu/bench/bench_target --model /tmp/bench_$SH --backend cuda --context 1024 --prefill 2048 \
    --batch 1,32 > "$OUT/bench_target.log" 2>&1; cat "$OUT/bench_target.log"
  for mode in ${PEERS-graph calls}; do  # PEERS="" runs none
    stamp "peer: $mode"
    timeout 150 python3 bench/hf_peer_target.py --model /tmp/bench_$SH --mode $mode --attn sdpa --context 1024 \
      --batch 1,32 > "$OUT/peer_$mode.log" 2>&1; grep -v -i "warn\|loading" "$OUT/peer_$mode.log" | tail -8
  done
  stamp "done"; exit 0
fi
if [ "$MODE" = lean ]; then  # one short call: the kernels' checks, then A/B by settings (and against build-old, if carried)
  (python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b > "$OUT/make.log" 2>&1
   [ "${SPEC:-0}" = 1 ] && python3 bench/hf_peer_target.py --make-draft /tmp/t8 /tmp/d8 >> "$OUT/make.log" 2>&1
   touch /tmp/made) &
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:/usr/local/cuda/lib
  B=gpu built=0
  unpack_prebuilt && built=1 && [ -d build-old ] && B="old gpu"
  if [ "$built" = 0 ]; then  # a build, never binaries a warm machine kept from an earlier call
    stamp "configure + build"
    { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
      cmake --build build-gpu -j16 --target test_ops_cpu test_cuda_mathf bench_target; } > "$OUT/build.log" 2>&1 ||
      { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  fi
  nvidia-smi --query-gpu=name --format=csv,noheader
  forms=${ATT_FORMS-tc tc-long fp32} # tc alone runs all three kernels (t_attention_runs' long caches: fp32)
  [ "${TESTS:-1}" = 1 ] && stamp "test_cuda_mathf, t_attention* ($forms), t_gemm*" &&
    timeout 120 build-gpu/tests/test_cuda_mathf 2>&1 | grep -E "bf16|div|mathf:|PASSED|FAILED"
  [ "${TESTS:-1}" = 1 ] || [ "${TESTS:-1}" = att ] || forms=""
  if [ "${TESTS:-1}" = all ]; then  # the whole op-parity harness on CUDA (every op against the CPU, the invariances)
    stamp "test_ops_cpu cuda (all)"
    timeout 400 build-gpu/tests/test_ops_cpu cuda > "$OUT/ops.log" 2>&1; echo "test_ops_cpu cuda: rc $?"
    grep -E "PASSED|FAILED|differ" "$OUT/ops.log" | tail -8
  fi
  for v in $forms; do  # a DSPARK_CUDA_ATTENTION value, or a VAR=value setting
    case $v in *=*) ;; *) v=DSPARK_CUDA_ATTENTION=$v ;; esac
    echo "t_attention* under $v"
    env "$v" timeout 200 build-gpu/tests/test_ops_cpu cuda '' 't_attention*' 2>&1 | grep -E "PASSED|FAILED|differ" | tail -3
  done
  if [ "${SAN:-0}" = att ]; then  # racecheck on the one-row kernels' cases
    timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/tests/test_ops_cpu cuda "" t_attention \
      > "$OUT/racecheck.log" 2>&1
    echo "racecheck t_attention rc $?: $(grep -E "RACECHECK SUMMARY" "$OUT/racecheck.log")"
  fi
  [ "${TESTS:-1}" = 1 ] && DSPARK_VERBOSE=1 timeout 200 build-gpu/tests/test_ops_cpu cuda '' 't_gemm*' 2>&1 |
    grep -E "token-tile|gemm rows N 5120|PASSED|FAILED|differ" | head -6
  for e in ${ATT_ENV:-DSPARK_NONE=1}; do  # each setting's tables (ATT_ENV: VAR=value settings)
    [ "${ROUNDS-1}" = 0 ] || (export "$e"; echo "$e" | tee -a "$OUT/att.log"; att_tables "$B" ${ROUNDS-1} "${ATT_LINES:-^prefill|^verify-8, batch 32 |^decode, batch 1 }")
  done
  while [ ! -f /tmp/made ]; do sleep 2; done
  for v in ${BT-224 auto 224 auto}; do  # a tile, or a VAR=value setting
    case $v in *=*) ;; *) v=DSPARK_GEMM_TILE=$v ;; esac
    for t in $B; do
      stamp "bench_target ($t) prefill 2048, $v"
      env "$v" timeout 150 build-$t/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 \
        --prefill ${BT_PREFILL:-2048} --batch ${BB:-1} 2>&1 | grep -E "prefill|rate|decode|verify" | grep -v "^|---"
    done
  done
  for r in $([ "${SPEC:-0}" = 1 ] && seq ${SPEC_ROUNDS:-2}); do  # the draft's proposal and the speculative round
    for t in $B; do for e in ${SPEC_ENV:-DSPARK_NONE=1}; do  # SPEC_ENV: VAR=value settings, each a run
      se=${SPEC_ENV:-DSPARK_NONE=1}; [ "$t" = old ] && [ "$e" != "${se%% *}" ] && continue  # build-old once a round
      stamp "bench_spec ($t, round $r, $e)"
      env "$e" timeout 150 build-$t/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda --context 1024 \
        --batch 1,32 2>&1 | grep -E "^\|" | grep -v "^|---"
    done; done
  done
  if [ "${NCU_STEP:-0}" = 1 ]; then  # ncu's per-kernel times of one batch-1 decode step, then DETAIL's kernel in detail
    stamp "ncu: one batch-1 decode step"
    ncu --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv \
      --launch-count 1400 build-gpu/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 --prefill 16 \
      --batch 1 --reps 3 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
    python3 scripts/ncu_step.py "$OUT/ncu.csv" | cut -c1-110
  fi
  for db in $([ -n "${DETAIL:-}" ] && echo ${DETAIL_BATCH:-1}); do  # DETAIL_BATCH: bench_target batches, each a report
    stamp "ncu: one $DETAIL launch of bench_target at batch $db (SKIP ${SKIP:-40})"
    ncu_detail "$DETAIL" ${SKIP:-40} ${TOP:-30} build-gpu/bench/bench_target --model /tmp/t8 --backend cuda \
      --context 1024 --prefill 16 --batch "$db" --reps 3
  done
  [ -n "${PT-auto 224 256}" ] && stamp "op harness: products (tiles ${PT-auto 224 256})"
  for v in ${PT-auto 224 256}; do  # every tile at every M: a tile's cost per k block, for the choice's model
    case $v in *=*) ;; *) v=DSPARK_GEMM_TILE=$v ;; esac
    echo "$v" | tee -a "$OUT/gemm.log"
    env "$v" timeout 200 build-gpu/tests/test_ops_cpu cuda perf gemm 2>&1 | grep -A40 "Qwen3-8B" |
      tee -a "$OUT/gemm.log" | grep -E "^(2048|256) x"
  done
  stamp "done"; exit 0
fi

if [ "$MODE" = rows ]; then  # the many-row attention kernel: its bits, and its speed against .old's (or the one-row kernel)
  (python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b > "$OUT/make.log" 2>&1; touch /tmp/made) &
  stamp "configure + build (lineinfo)"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-lineinfo &&
    cmake --build build-gpu -j16 --target test_ops_cpu test_cuda_mathf bench_target; } > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  B="gpu"
  if [ -d .old ]; then
    stamp "configure + build (.old)"
    build_old test_ops_cpu bench_target && B="old gpu" || { tail -20 "$OUT/build_old.log"; echo "OLD BUILD FAILED"; }
  fi
  stamp "test_cuda_mathf (the hardware bf16 rounding), t_attention* with tc, tc-long and fp32"
  timeout 120 build-gpu/tests/test_cuda_mathf 2>&1 | grep -E "bf16|div|mathf:|PASSED|FAILED"
  for v in tc tc-long fp32; do
    DSPARK_VERBOSE=1 DSPARK_CUDA_ATTENTION=$v timeout 200 build-gpu/tests/test_ops_cpu cuda '' 't_attention*' 2>&1 |
      grep -v "^\[ *OK\|^\[ RUN" | tail -8
  done
  if [ "${SAN:-1}" = 1 ]; then
    DSPARK_CUDA_ATTENTION=tc-long timeout 450 compute-sanitizer --tool racecheck --error-exitcode 9 \
      build-gpu/tests/test_ops_cpu cuda "" t_attention_runs > "$OUT/racecheck.log" 2>&1
    echo "racecheck t_attention_runs rc $?: $(grep -E "RACECHECK SUMMARY" "$OUT/racecheck.log")"
  fi
  att_tables "$B" ${ROUNDS:-2} "^prefill|^verify-8, batch 32 |^decode, batch 1 "
  if [ "${LONG:-1}" = 1 ]; then
    stamp "op harness attention tables, DSPARK_CUDA_ATTENTION=tc-long" | tee -a "$OUT/att.log"
    DSPARK_CUDA_ATTENTION=tc-long timeout 200 build-gpu/tests/test_ops_cpu cuda perf attention 2>&1 |
      grep -A8 "^attention" | tee -a "$OUT/att.log" | grep -A6 "prefill (32\|context 8192"
  fi
  stamp "products: t_gemm* (this tree), the op harness's Qwen3-8B product table (.old and this tree)"
  timeout 200 build-gpu/tests/test_ops_cpu cuda "" 't_gemm*' 2>&1 | grep -E "gemm rows N 5120|PASSED|FAILED|differ" | head -6
  for t in $B; do
    echo "products ($t)" >> "$OUT/gemm.log"
    timeout 200 build-$t/tests/test_ops_cpu cuda perf gemm 2>&1 | grep -A40 "Qwen3-8B" | tee -a "$OUT/gemm.log" |
      grep -E "^(2048|256) x"
  done
  stamp "ncu: the first many-row launch (prefill 1024 of the harness)"
  [ "${NCU:-1}" = 1 ] && ncu_detail "regex:k_attention_pf" ${SKIP:-0} ${TOP:-30} build-gpu/tests/test_ops_cpu cuda perf attention
  while [ ! -f /tmp/made ]; do sleep 2; done
  runs="old:tc gpu:tc old:tc gpu:tc"; [ "$B" = gpu ] && runs="gpu:tc-one-row gpu:tc gpu:tc-one-row gpu:tc"
  for tv in $runs; do
    t=${tv%%:*} v=${tv#*:}
    stamp "bench_target prefill 2048 ($t), DSPARK_CUDA_ATTENTION=$v"
    DSPARK_CUDA_ATTENTION=$v timeout 150 build-$t/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 \
      --prefill 2048 --batch 1 2>&1 | grep -E "prefill|rate" | grep -v "^|---"
  done
  stamp "done"; exit 0
fi
if [ "$MODE" = prefill ]; then  # one attention launch of a 1024-row context forward in detail (Qwen3-8B's shapes)
  (python3 bench/hf_peer_target.py --make /tmp/t2 --shape qwen3-8b --layers 2 > "$OUT/make.log" 2>&1) &
  stamp "configure + build (lineinfo)"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-lineinfo &&
    cmake --build build-gpu -j16 --target bench_target; } > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  wait
  stamp "ncu: the context forward's first attention launch (2 m-tiles: 8 rows of 4 heads a block)"
  ncu_detail "regex:k_attention_tc<\(int\)2" ${SKIP:-0} ${TOP:-40} build-gpu/bench/bench_target --model /tmp/t2 \
    --backend cuda --context ${CONTEXT:-1024} --prefill 16 --batch 1 --reps 3
  rm -rf /tmp/t2
  stamp "done"; exit 0
fi
if [ "$MODE" = chain ]; then
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:/usr/local/cuda/lib
  if ! unpack_prebuilt; then
    stamp "configure + build"
    { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
      cmake --build build-gpu -j16 --target bench_chain test_ops_cpu bench_gemm_small test_cuda_nccl; } \
      > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  fi
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  stamp "bench_chain"
  timeout 300 build-gpu/bench/bench_chain; echo "bench_chain: rc $?"
  for t in t_gemm_rows t_gemm_slices; do
    DSPARK_GEMM_SMALL=1 timeout 150 build-gpu/tests/test_ops_cpu cuda "" $t > "$OUT/$t.log" 2>&1
    echo "$t: rc $?"; grep -E "gemm rows|gemm slices|FAILED|PASSED" "$OUT/$t.log" | head -4
  done
  if [ -x build-old/bench/bench_gemm_small ]; then
    for r in $(seq ${ROUNDS:-2}); do
      for b in old gpu; do
        stamp "bench_gemm_small ($b)"
        timeout 120 build-$b/bench/bench_gemm_small --m 1,8,16 --shapes 0:0:0,sl | grep "^|" | grep -v "^|---"
      done
    done
  fi
  stamp "test_cuda_nccl"
  timeout 150 build-gpu/tests/test_cuda_nccl > "$OUT/nccl.log" 2>&1; echo "test_cuda_nccl: rc $?"; tail -6 "$OUT/nccl.log"
  stamp "done"; exit 0
fi

if [ "$MODE" = slices ]; then
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:/usr/local/cuda/lib
  export DSPARK_TP_INVARIANT=1 # CUDA's default (auto) is one sum over K; the bench sets it per run
  if [ "${PART:-test}" = bench ]; then
    rm -f /tmp/made
    ( { python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b &&
        python3 bench/hf_peer_target.py --make-draft /tmp/t8 /tmp/d8; } > "$OUT/make.log" 2>&1; echo made > /tmp/made ) &
  fi
  if ! unpack_prebuilt; then
    stamp "configure + build"
    { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
      cmake --build build-gpu -j16 --target dspark_tool test_ops_cpu target_driver draft_driver bench_target bench_spec; } \
      > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  fi
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for v in 1 0; do # which order the models run, by the start-up line
    echo "DSPARK_TP_INVARIANT=$v: $(DSPARK_TP_INVARIANT=$v build-gpu/dspark generate --model models/kjv-target \
      --prompt-ids 1,2,3 --max-new 2 --backend cuda 2>&1 | grep -o "o and down in [^;)]*" | head -1)"
  done
  if [ "${PART:-test}" = test ]; then
    stamp "products: t_gemm*"
    DSPARK_VERBOSE=1 timeout 200 build-gpu/tests/test_ops_cpu cuda "" "t_gemm*" > "$OUT/gemm.log" 2>&1
    echo "test_ops t_gemm*: rc $?"; grep -E "gemm slices|gemm rows:|gemm f32|ERROR|FAILED|PASSED|^\[ +OK" "$OUT/gemm.log" | head -16
    stamp "memcheck: t_gemm_slices"
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_ops_cpu cuda "" t_gemm_slices \
      > "$OUT/memcheck.log" 2>&1; echo "memcheck rc $?: $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
    # the cases that run o and down against the reference, and batch invariance (few-row kernel against the split)
    ORACLE_TIMEOUT=150 cuda_oracles "FAIL|not run|passed|FAILED|TP-invariant|one sum" \
      "test_qwen3.py --driver build-gpu/tests/target_driver --only reference --only invariance --only tp_invariant \
       --only row_parallel" \
      "test_dspark.py --driver build-gpu/tests/draft_driver --only reference --only invariance --only graphs" \
      "test_speculative.py --only greedy"
    stamp "token parity (device_multi.sh parity)"
    PREBUILT=${PREBUILT:-0} LAYERS=${LAYERS:-8} timeout 200 scripts/device_multi.sh parity 2>&1 | tail -14
  else
    stamp "bench_gemm_small: one sum over K, 8 slices on the few-row kernel, the 8-block split"
    timeout 150 build-gpu/bench/bench_gemm_small --m ${GSM:-1,8,32} --shapes 0:0:0,sl,sp 2>&1 | grep -E "^\||^device" |
      grep -v "^|---" | grep -E "device|^\| (o|down)"
    while [ ! -f /tmp/made ]; do sleep 2; done
    for r in $(seq ${ROUNDS:-2}); do
      for v in 0 1; do
        stamp "bench_target, random Qwen3-8B, DSPARK_TP_INVARIANT=$v"
        DSPARK_TP_INVARIANT=$v timeout 150 build-gpu/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 \
          --prefill 2048 --batch 1,32 2>&1 | grep -E "^\||slices" | grep -v "^|---"
      done
    done
    for v in 0 1; do
      stamp "bench_spec, random Qwen3-8B pair, DSPARK_TP_INVARIANT=$v"
      DSPARK_TP_INVARIANT=$v timeout 150 build-gpu/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda \
        --context 1024 --batch 1,32 2>&1 | grep -E "^\||slices" | grep -v "^|---"
    done
  fi
  stamp "done"; exit 0
fi
if [ "$MODE" = h200 ]; then  # the H200 goals of issues 16-19 in one call, each beside its peer (PEERS=0: none)
  PIP=""
  if [ -d .whl ]; then
    { pip install --no-deps --target /tmp/pyfla .whl/*.whl > "$OUT/pip.log" 2>&1 || tail -3 "$OUT/pip.log"; } &
    PIP=$!
  fi
  rm -f /tmp/made
  ( { python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b &&
      python3 bench/hf_peer_target.py --make-draft /tmp/t8 /tmp/d8; } > "$OUT/make.log" 2>&1; echo made > /tmp/made ) &
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:/usr/local/cuda/lib
  B=gpu
  if unpack_prebuilt; then [ -d build-old ] && B="old gpu"
  else
    stamp "configure + build"
    { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
      cmake --build build-gpu -j16 --target dspark_tool bench_target bench_spec bench_kda bench_gemm_small test_ops_cpu; } \
      > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  fi
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv,noheader
  if [ -d .old ]; then
    stamp "configure + build (.old)"
    build_old bench_target && B="old gpu" || { tail -20 "$OUT/build_old.log"; echo "OLD BUILD FAILED"; }
  fi
  timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_layers > "$OUT/layers.log" 2>&1; echo "t_layers: rc $?"
  stamp "products: t_gemm_rows with every few-row product on mma.sync; the two kernels at 16 and 32 rows"
  DSPARK_GEMM_SMALL=1 timeout 120 build-gpu/tests/test_ops_cpu cuda "" t_gemm_rows > "$OUT/rows.log" 2>&1
  echo "t_gemm_rows (DSPARK_GEMM_SMALL=1): rc $?"; grep -E "gemm rows N" "$OUT/rows.log" | head -5
  timeout 120 build-gpu/bench/bench_gemm_small --m ${GSM:-16,32} --shapes 0:0:0,wg 2>&1 | grep -E "^\||^device" | grep -v "^|---"
  stamp "bench_kda (issue 19)"
  timeout 150 build-gpu/bench/bench_kda --backend cuda 2>&1 | grep -E "^#|^\| (decode|prefill)|copy"
  [ -n "$PIP" ] && wait $PIP
  if [ "${PEERS:-1}" = 1 ] && [ -d /tmp/pyfla ]; then
    stamp "fla peer"
    PYTHONPATH=/tmp/pyfla timeout 200 python3 bench/fla_peer_kda.py > "$OUT/peer_kda.log" 2>&1
    grep -E "^\||^#" "$OUT/peer_kda.log" | grep -v "^|---"
  fi
  while [ ! -f /tmp/made ]; do sleep 2; done
  if [ "$B" = "old gpu" ]; then
    stamp "bench_target (.old), random Qwen3-8B"
    timeout 200 build-old/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 --prefill 2048 \
      --batch 1,32 2>&1 | grep -E "^\||rate" | grep -v "^|---"
  fi
  for v in ${VALUES:-auto}; do
    stamp "bench_target, random Qwen3-8B (issue 16), DSPARK_GEMM_SMALL=$v"
    DSPARK_GEMM_SMALL=$v timeout 200 build-gpu/bench/bench_target --model /tmp/t8 --backend cuda --context 1024 \
      --prefill 2048 --batch 1,32 2>&1 | grep -E "^#|^\||copy|rate" | grep -v "^|---"
    stamp "bench_spec, random Qwen3-8B pair (issues 17, 18), DSPARK_GEMM_SMALL=$v"
    DSPARK_GEMM_SMALL=$v timeout 200 build-gpu/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda \
      --context 1024 --batch 1,32 2>&1 | grep -E "^#|^\||copy|project" | grep -v "^|---"
  done
  if [ "${PEERS:-1}" = 1 ]; then
    stamp "peers: the target's PyTorch CUDA-graph step, the draft's PyTorch proposal"
    timeout 200 python3 bench/hf_peer_target.py --model /tmp/t8 --mode graph --attn sdpa --context 1024 \
      --batch 1,32 > "$OUT/peer_graph.log" 2>&1; grep -v -i "warn\|loading" "$OUT/peer_graph.log" | tail -8
    timeout 200 python3 bench/torch_peer_draft.py > "$OUT/peer_draft.log" 2>&1; grep -E "^#|^\|" "$OUT/peer_draft.log"
  fi
  # NCU=batch: ncu's per-kernel times of one step at that batch (NCUSKIP launches skipped: the contexts' forwards
  # come first, about 330 launches per sequence; NCUSTEP: the steps shown, -2 the window's last complete one)
  if [ -n "${NCU:-}" ]; then
    stamp "ncu: one batch-$NCU decode step"
    ncu --graph-profiling node --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv \
      --launch-skip ${NCUSKIP:-0} --launch-count 1500 build-gpu/bench/bench_target --model /tmp/t8 --backend cuda \
      --context 1024 --prefill 16 --batch $NCU --reps 3 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
    for st in ${NCUSTEP:-1}; do python3 scripts/ncu_step.py "$OUT/ncu.csv" --step $st | cut -c1-110; done
  fi
  rm -rf /tmp/t8 /tmp/d8
  [ "${SHIP:-1}" = 1 ] && shipped_pair
  stamp "done"; exit 0
fi
if [ "$MODE" = bench ]; then
  stamp "bench_cuda_head: old / new / old / new"
  : > "$OUT/bench.log"
  for r in 1 2; do
    for t in old gpu; do
      B=""
      for c in build-$t/bench/bench_cuda_head build-$t/tests/bench_cuda_head; do [ -x $c ] && B=$c && break; done
      [ -n "$B" ] || continue
      echo "===== $t (round $r): $B" >> "$OUT/bench.log"
      timeout 200 $B >> "$OUT/bench.log" 2>&1
    done
  done
  grep -E "=====|^device|^floors|variant \(greedy\)|^default|^ring|^register|^LM head|^original|^sampling variant|^parity|^batch invariance|^energy \(" "$OUT/bench.log" | head -90
  stamp "done"; exit 0
fi
stamp "GPU tests"
# SAN=0 also leaves out ctest's racecheck cases (about 300 s of the suite's 480)
(cd build-gpu && timeout 420 ctest -L gpu $([ "${SAN:-1}" = 0 ] && echo "-E racecheck") --output-on-failure) > "$OUT/tests.log" 2>&1
grep -E "tests passed|Passed|Failed|Skipped|\*\*\*" "$OUT/tests.log" | tail -8
grep -E "values compared|differ|dspark: markov" "$OUT/tests.log" | head -12
SUMMARY+="gpu tests: $(grep -E 'tests passed' "$OUT/tests.log"); "

if [ "${SAN:-1}" = 1 ]; then
  stamp "compute-sanitizer"
  {
    echo "== memcheck t_inputs_change"
    timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_cuda_head t_inputs_change 2>&1 | tail -3
    echo "== racecheck t_rounding_ties"
    timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/tests/test_cuda_head t_rounding_ties 2>&1 | tail -3
  } > "$OUT/sanitizer.log" 2>&1
  grep -E "==|SUMMARY" "$OUT/sanitizer.log"
  SUMMARY+="sanitizer: $(grep -c 'ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer.log") of 2 clean; "
fi

if [ "${PERF:-1}" = 1 ]; then
  stamp "op harness perf"
  timeout 200 build-gpu/tests/test_ops_cpu cuda perf > "$OUT/ops_perf.log" 2>&1
  grep -vE "^\[" "$OUT/ops_perf.log" | head -12
fi

stamp "CLI parity: CPU vs CUDA"
cli_parity > "$OUT/parity.log" 2>&1
grep -E "PARITY|dspark: markov|rc=|error|differ" "$OUT/parity.log"
SUMMARY+="parity: $(grep -c PARITY "$OUT/parity.log") of 2; "

[ "${SHIP:-1}" = 1 ] && shipped_pair

stamp "done"
echo "SUMMARY: $SUMMARY"
