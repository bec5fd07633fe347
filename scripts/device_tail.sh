#!/bin/bash
# One call on a GPU machine, from the repository root: build the CUDA backend,
# run bench_tail (the tail kernels alone, with ring kernels 4-5's per-step
# trace) and the GPU head tests; with MODE=bench also bench_cuda_head and the
# PyTorch peer. nvidia-smi logs clocks, power and throttle reasons meanwhile.
# Knobs: TAIL_ARGS (bench_tail argument sets separated by '|'; none: skip), TESTS=0,
# FORCE_TAILS (DSPARK_CUDA_TAIL values to rerun the tests with, default "ring ring-wgmma"),
# SAN=1 and SAN_TAIL (compute-sanitizer on that kernel; SAN_MEM_TESTS and
# SAN_RACE_TESTS pick the tests), NCU=1, LM_ARGS (run
# bench_lm, the cuBLASLt sweep, with these arguments; "-" for defaults). Logs go to
# $OUT; the last lines printed are the summary.
set -u
MODE=${MODE:-tail}
source scripts/device_env.sh
stamp build
if ! { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
       cmake --build build-gpu -j16 --target dspark test_cuda_head bench_tail bench_cuda_head bench_lm; } > "$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
BIN=build-gpu/bench; TBIN=build-gpu/tests
# clocks, power and temperature every 50 ms while the benchmarks run
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 50 > "$OUT/smi.csv" 2>&1 &
SMI=$!
# TAIL_ARGS: one or more argument sets for bench_tail, separated by '|'
IFS='|' read -ra RUNS <<< "${TAIL_ARGS:-}"
[ ${#RUNS[@]} = 0 ] && RUNS=("")
[ "${TAIL_ARGS:-}" = none ] && RUNS=()
for i in "${!RUNS[@]}"; do
  stamp "bench_tail ${RUNS[$i]}"
  timeout 200 $BIN/bench_tail ${RUNS[$i]} > "$OUT/bench_tail_$i.log" 2>&1
  head -80 "$OUT/bench_tail_$i.log"
done
if [ -n "${LM_ARGS:-}" ]; then
  stamp "bench_lm ${LM_ARGS}"
  [ "$LM_ARGS" = - ] && LM_ARGS=
  timeout 300 $BIN/bench_lm $LM_ARGS > "$OUT/bench_lm.log" 2>&1
  echo "bench_lm rc=$?"; tail -22 "$OUT/bench_lm.log"
fi
if [ "${NCU:-0}" = 1 ]; then
  stamp "ncu (ring kernel 4, one launch) and its SASS"
  timeout 240 ncu --clock-control none -k regex:rd_kernel -c 1 --set full --import-source no -o /tmp/rd -f \
    $BIN/bench_tail --reps 1 > "$OUT/ncu_run.log" 2>&1
  ncu -i /tmp/rd.ncu-rep --page details > "$OUT/ncu.log" 2>&1
  ncu -i /tmp/rd.ncu-rep --page source --csv --print-source sass > "$OUT/ncu_sass.csv" 2>&1
  grep -E "Duration|DRAM Throughput|L2 Hit|Warp Cycles Per Issued|Issue Slots|Stall|Registers Per|Achieved Occ" "$OUT/ncu.log" | head -30
  OBJ=$(find build-gpu -name 'markov_g.cu.o' | head -1)
  cuobjdump -sass "$OBJ" | awk '/Function : /{p = /rd_kernel/} p' > "$OUT/sass_rd.txt"
  wc -l "$OUT/sass_rd.txt" "$OUT/ncu_sass.csv"
fi
if [ "${TESTS:-1}" = 1 ]; then
  stamp test_cuda_head
  timeout 300 $TBIN/test_cuda_head > "$OUT/tests.log" 2>&1
  echo "test_cuda_head rc=$?"
  grep -E "^\[ *(FAILED|PASSED|ERROR) *\]|differ|mismatch|wgmma check" "$OUT/tests.log" | head -30
  for T in ${FORCE_TAILS:-ring ring-wgmma}; do
    DSPARK_CUDA_TAIL=$T timeout 300 $TBIN/test_cuda_head > "$OUT/tests_tail$T.log" 2>&1
    echo "test_cuda_head with DSPARK_CUDA_TAIL=$T (that kernel everywhere) rc=$?"
    grep -E "^\[ *(FAILED|PASSED|ERROR) *\]|wgmma check" "$OUT/tests_tail$T.log" | head -20
  done
fi
if [ "${SAN:-0}" = 1 ]; then
  stamp "compute-sanitizer with DSPARK_CUDA_TAIL=${SAN_TAIL:-ring}"
  {
    for t in ${SAN_MEM_TESTS:-t_specials t_vocab_padding t_inputs_change}; do
      echo "== memcheck $t"; DSPARK_CUDA_TAIL=${SAN_TAIL:-ring} timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $TBIN/test_cuda_head $t > /tmp/san.txt 2>&1
      echo "rc=$?"; grep -m1 -A10 "^========= [A-Z]" /tmp/san.txt | head -12; tail -3 /tmp/san.txt
    done
    for t in ${SAN_RACE_TESTS:-t_rounding_ties t_vocab_padding t_inputs_change}; do
      echo "== racecheck $t"; DSPARK_CUDA_TAIL=${SAN_TAIL:-ring} timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $TBIN/test_cuda_head $t > /tmp/san.txt 2>&1
      echo "rc=$?"; grep -m1 -A10 "^========= [A-Z]" /tmp/san.txt | head -12; tail -3 /tmp/san.txt
    done
  } > "$OUT/sanitizer.log" 2>&1
  grep -E "^==|rc=|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log"
fi
if [ "$MODE" = bench ]; then
  stamp bench_cuda_head
  timeout 300 $BIN/bench_cuda_head --json "$OUT/cuda.json" > "$OUT/bench_floor.log" 2>&1
  grep "order probe" "$OUT/bench_floor.log"; tail -28 "$OUT/bench_floor.log"
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_peer.py --merge "$OUT/cuda.json" > "$OUT/torch.log" 2>&1
  sed -n '/one table/,$p' "$OUT/torch.log" | head -30
fi
kill $SMI 2>/dev/null
stamp done
