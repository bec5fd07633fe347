#!/bin/bash
# On the GPU machine, from the repository root (run through the device tool):
# build the CUDA backend, run its tests, compute-sanitizer memcheck/racecheck,
# a SASS summary of the step kernel, the benchmark and the PyTorch peer.
# Logs go to $OUT (at most 8 files); the last lines printed are the summary.
# usage: scripts/device_check.sh [all|test|bench]
# env: NCU=0 skips ncu, SAN=0 skips compute-sanitizer, TORCH=0 skips the PyTorch peer
set -u
MODE=${1:-all}
OUT=${OUT:-/tmp/dspark_out}
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

source scripts/device_env.sh
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv
  nvcc --version | tail -1
  which mpicc cmake compute-sanitizer cuobjdump
} > "$OUT/info.txt" 2>&1

stamp "configure + build"
if ! { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
       cmake --build build-gpu -j16 --target dspark test_cuda_head test_cuda_nccl bench_cuda_head; } > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
BIN=build-gpu/tests
[ -x $BIN/test_cuda_head ] || BIN=build-gpu
SUMMARY=""

if [ "$MODE" != bench ]; then
  stamp "tests"
  timeout 300 $BIN/test_cuda_head > "$OUT/tests.log" 2>&1
  rc=$?; SUMMARY+="test_cuda_head rc=$rc; "
  timeout 120 $BIN/test_cuda_nccl >> "$OUT/tests.log" 2>&1
  rc=$?; SUMMARY+="test_cuda_nccl rc=$rc (77 = skipped); "
  grep -E "^\[ *(OK|FAILED|PASSED|ERROR) *\]|tensor cores vs|LM head|dspark: markov|differ|mismatch|skipped" "$OUT/tests.log" | head -60

  if [ "${SAN:-1}" = 1 ]; then
  stamp "compute-sanitizer"
  {
    for t in t_specials t_vocab_padding t_inputs_change; do
      echo "== memcheck $t"; timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/test_cuda_head $t > /tmp/san.txt 2>&1
      grep -m1 -B2 -A14 "^========= [A-Z]" /tmp/san.txt | grep -v "ERROR SUMMARY" | head -16; tail -6 /tmp/san.txt
    done
    for t in t_rounding_ties t_vocab_padding; do
      echo "== racecheck $t"; timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN/test_cuda_head $t > /tmp/san.txt 2>&1
      grep -m1 -B2 -A14 "^========= [A-Z]" /tmp/san.txt | grep -v "SUMMARY" | head -16; tail -6 /tmp/san.txt
    done
  } > "$OUT/sanitizer.log" 2>&1
  grep -E "==|ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log"
  SUMMARY+="sanitizer: $(grep -c 'ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer.log") clean of 5; "
  fi

  OBJ=$(find build-gpu -name 'markov_g.cu.o' | head -1)
  if [ -n "$OBJ" ]; then
    cuobjdump -sass "$OBJ" > /tmp/sass.txt 2>&1
    { echo "kernels:"; grep -o 'Function : [^ ]*' /tmp/sass.txt
      for p in HMMA LDG.E.128 'LDG.E.128.CONSTANT' LDS.128 ATOMS ATOMG RED UBLKPF CCTL STL LDL; do
        printf "%-20s %s\n" "$p" "$(grep -c "$p" /tmp/sass.txt)"; done
      for p in UBLKCP SYNCS; do printf "%-20s %s\n" "$p" "$(grep -c "$p" /tmp/sass.txt)"; done; } > /tmp/sass_summary.txt
    cat /tmp/sass_summary.txt >> "$OUT/info.txt"
    tail -14 /tmp/sass_summary.txt
  fi
fi

if [ "$MODE" != test ] && [ "${NCU:-1}" = 1 ]; then
  stamp "ncu (tail kernels, one eager launch each)"
  timeout 150 ncu --clock-control none -k 'regex:rd_kernel|mk_kernel' -c 2 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    $BIN/bench_cuda_head --profile > "$OUT/ncu.log" 2>&1
  grep -E "rd_kernel|mk_kernel|^ *Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|L1/TEX Hit|Compute \(SM\) Throughput|Warp Cycles Per Issued|Achieved Occupancy|Registers Per" "$OUT/ncu.log" | sed 's/_ZN[^ ]*_cu_[0-9a-f]*//' | head -40
fi

if [ "$MODE" != test ]; then
  stamp "bench"
  timeout 240 $BIN/bench_cuda_head --json "$OUT/cuda.json" > "$OUT/bench.log" 2>&1
  SUMMARY+="bench rc=$?; "
  cat "$OUT/bench.log"
  if [ "${TORCH:-1}" = 1 ]; then
  stamp "torch peer"
  PYTHONUNBUFFERED=1 timeout 180 python3 bench/torch_peer.py --merge "$OUT/cuda.json" > "$OUT/torch.log" 2>&1
  SUMMARY+="torch peer rc=$?; "
  sed -n '/one table/,$p' "$OUT/torch.log"
  fi
fi
stamp "done: $SUMMARY"
