#!/bin/bash
# One call on a GPU machine: build bench_lm and profile the own LM-head kernel
# (one full-size launch each) with ncu: single blocks against clusters of two
# (VARIANTS: mangled-name fragments; each skips the creation check's small launch).
set -u
source scripts/device_env.sh
if ! { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
       cmake --build build-gpu -j16 --target bench_lm; } > "$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
BIN=build-gpu/bench
for V in ${VARIANTS:-lw_kernelILi224ELi1ELi0E lw_kernelILi224ELi2ELi0E}; do
  timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:$V --launch-skip 1 -c 1 --set full \
    --import-source no -o /tmp/p_$V -f $BIN/bench_lm --sweep 0 --rounds 1 --reps 1 > "$OUT/ncu_run_$V.log" 2>&1
  echo "== $V rc=$?"
  ncu -i /tmp/p_$V.ncu-rep --page details > "$OUT/ncu_$V.log" 2>&1
  ncu -i /tmp/p_$V.ncu-rep --page raw --csv > "$OUT/ncu_raw_$V.csv" 2>&1
  grep -E "Duration|SM Frequency|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\)|Memory Throughput|Grid Size|Cluster|Warp Cycles Per Issued|Executed Ipc A" "$OUT/ncu_$V.log" | head -24
done
