#!/bin/bash
# One call on a GPU machine (any nvidia-h200 kind), from the repository root:
# build, the GPU tests, CLI parity against the CPU backend, the head benchmark
# through `bench_head --backend cuda` at TP1 and, with N >= 2 GPUs, at
# TP N (one process per GPU under mpirun, broadcast on and off, and one process
# driving all of them), bench_cuda_head with floors and the PyTorch peer.
# Logs go to $OUT; the last lines printed are the summary.
set -u
source scripts/device_env.sh
NG=$(nvidia-smi -L | wc -l)
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$OUT/topo.txt" 2>&1
stamp "build ($NG GPUs)"
if ! { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
       cmake --build build-gpu -j32; } > "$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
D=build-gpu/dspark
stamp "GPU tests"
(cd build-gpu && timeout 420 ctest -L gpu --output-on-failure) > "$OUT/tests.log" 2>&1
grep -E "tests passed|Passed|Failed|Skipped|mismatch" "$OUT/tests.log" | tail -8

stamp "CLI parity: CPU vs CUDA (strict and tensor-core), TP1 and TP$NG"
{
  build-gpu/bench/synth --weights /tmp/w.st --inputs /tmp/i.st --vocab 50000 --vocab-padded 50003 --hidden 1024 --rank 256 \
    --batch 12 --gamma 7 --seed 3 --sampled-every 3
  $D head --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_cpu.st --dump-logits
  DSPARK_CUDA_STRICT=1 $D head --backend cuda --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_strict.st --dump-logits
  cmp /tmp/o_cpu.st /tmp/o_strict.st && echo "PARITY strict CUDA == CPU (tokens and logits, byte-identical)"
  for p in original sharded replicated; do
    $D head --backend cuda --path $p --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_g_$p.st --dump-logits
  done
  cmp /tmp/o_g_original.st /tmp/o_g_sharded.st && cmp /tmp/o_g_original.st /tmp/o_g_replicated.st &&
    echo "PARITY CUDA paths byte-identical at TP1"
  if [ "$NG" -ge 2 ]; then
    for p in original sharded replicated; do
      mpirun --allow-run-as-root -np $NG $D head --backend cuda --path $p --weights /tmp/w.st --inputs /tmp/i.st \
        --out /tmp/o_m_$p.st --dump-logits
      cmp /tmp/o_g_original.st /tmp/o_m_$p.st && echo "PARITY TP$NG (mpirun, $p) == TP1"
      $D head --backend cuda --tp $NG --path $p --weights /tmp/w.st --inputs /tmp/i.st --out /tmp/o_t_$p.st --dump-logits
      cmp /tmp/o_g_original.st /tmp/o_t_$p.st && echo "PARITY TP$NG (one process, --tp $NG, $p) == TP1"
    done
  fi
  $D show /tmp/o_g_original.st | head -8
} > "$OUT/parity.log" 2>&1
grep -E "PARITY|error" "$OUT/parity.log"

stamp "bench_head --backend cuda, TP1"
timeout 200 build-gpu/bench/bench_head --backend cuda --rounds 5 --replays 40 > "$OUT/bench_tp1.log" 2>&1
tail -9 "$OUT/bench_tp1.log"
if [ "$NG" -ge 2 ]; then
  for bc in on off; do
    stamp "TP$NG, mpirun, broadcast $bc"
    timeout 200 mpirun --allow-run-as-root -np $NG build-gpu/bench/bench_head --backend cuda --rounds 5 --replays 40 --broadcast $bc \
      > "$OUT/bench_tp2_$bc.log" 2>&1
    tail -8 "$OUT/bench_tp2_$bc.log"
  done
  stamp "TP$NG, one process driving all GPUs"
  timeout 200 build-gpu/bench/bench_head --backend cuda --tp $NG --rounds 5 --replays 40 > "$OUT/bench_tp2_proc.log" 2>&1
  tail -7 "$OUT/bench_tp2_proc.log"
fi
stamp "bench_cuda_head (floors) and the PyTorch peer"
BIN=build-gpu/bench
timeout 200 $BIN/bench_cuda_head --json "$OUT/cuda.json" > "$OUT/bench_floor.log" 2>&1
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_peer.py --merge "$OUT/cuda.json" > "$OUT/torch.log" 2>&1
sed -n '/one table/,$p' "$OUT/torch.log" | head -30
stamp done
