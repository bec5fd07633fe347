#!/bin/bash
# On a 2-GPU machine (nvidia-h200-x2), from the repository root: build, the
# NCCL tests with the default tail kernel and with ring kernels 4 and 5 forced
# (TP2 runs the multi-segment original path), the TP1 head benchmark with the
# PyTorch peer, and the TP2 benchmark under mpirun. Logs go to $OUT.
set -u
source scripts/device_env.sh
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
stamp build
if ! { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
       cmake --build build-gpu -j32 --target dspark_tool test_cuda_nccl bench_cuda_head; } > "$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
BIN=build-gpu/tests; BBIN=build-gpu/bench
stamp "test_cuda_nccl (default, then DSPARK_CUDA_TAIL=ring and ring-wgmma)"
timeout 150 $BIN/test_cuda_nccl > "$OUT/nccl.log" 2>&1; echo "rc=$?"
grep -E "^\[ *(FAILED|PASSED|ERROR) *\]|differ|mismatch|compar" "$OUT/nccl.log" | head -12
for T in ring ring-wgmma; do
  DSPARK_CUDA_TAIL=$T timeout 150 $BIN/test_cuda_nccl > "$OUT/nccl_tail$T.log" 2>&1; echo "DSPARK_CUDA_TAIL=$T rc=$?"
  grep -E "^\[ *(FAILED|PASSED|ERROR) *\]|differ|mismatch|compar" "$OUT/nccl_tail$T.log" | head -12
done
stamp "TP2 bench (mpirun, broadcast on)"
timeout 120 mpirun --allow-run-as-root -np 2 build-gpu/bench/bench_head --backend cuda --rounds 3 --replays 20 \
  > "$OUT/bench_tp2.log" 2>&1
tail -8 "$OUT/bench_tp2.log"
[ "${BENCH1:-1}" = 1 ] || { stamp done; exit 0; }
stamp "bench_cuda_head (TP1, GPU 0) and the PyTorch peer"
CUDA_VISIBLE_DEVICES=0 timeout 150 $BBIN/bench_cuda_head --json "$OUT/cuda.json" > "$OUT/bench_floor.log" 2>&1
tail -26 "$OUT/bench_floor.log" | head -24
CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 timeout 100 python3 bench/torch_peer.py --merge "$OUT/cuda.json" > "$OUT/torch.log" 2>&1
sed -n '/one table/,$p' "$OUT/torch.log" | head -8
stamp done
