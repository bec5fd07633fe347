#!/usr/bin/env bash
# `make run`: the Markov head on a small seeded checkpoint under 4 MPI ranks,
# through each path, on a batch mixing greedy and sampled requests; the tokens,
# the parity between paths, and a short timing table.
set -euo pipefail
BUILD=${1:-build}
D="$BUILD/dspark"
SYNTH="$BUILD/bench/synth"
BENCH="$BUILD/bench/bench_head"
OUT="$BUILD/demo"
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
       OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 \
       OMPI_MCA_hwloc_base_binding_policy=none
MPIRUN="mpirun -np 4"

echo "== dspark info"
"$D" info

echo; echo "== a seeded checkpoint (V 32000 padded to 32003, H 512, R 64) and 6 requests, every 2nd sampled at T 0.8"
"$SYNTH" --weights "$OUT/w.safetensors" --inputs "$OUT/i.safetensors" --vocab 32000 --vocab-padded 32003 \
  --hidden 512 --rank 64 --batch 6 --gamma 7 --seed 7 --sampled-every 2 --temperature 0.8

for mode in sampled greedy; do
  inputs="$OUT/i.safetensors"
  if [ $mode = greedy ]; then
    "$SYNTH" --inputs "$OUT/ig.safetensors" --vocab 32000 --hidden 512 --batch 6 --gamma 7 --seed 7
    inputs="$OUT/ig.safetensors"
  fi
  for path in original sharded replicated; do
    echo; echo "== $mode batch, $path path, TP4 ($MPIRUN dspark head --path $path)"
    $MPIRUN "$D" head --weights "$OUT/w.safetensors" --inputs "$inputs" --out "$OUT/o_${mode}_$path.safetensors" \
      --path $path --dump-logits
    [ $path = original ] && "$D" show "$OUT/o_${mode}_$path.safetensors"
  done
  same=0
  for path in sharded replicated; do
    cmp -s "$OUT/o_${mode}_original.safetensors" "$OUT/o_${mode}_$path.safetensors" && same=$((same + 1))
  done
  echo "parity ($mode): sharded and replicated outputs (tokens and corrected logits) byte-identical to original: $same of 2"
  [ $same = 2 ] || { echo "demo: PARITY FAILED" >&2; exit 1; }
done

echo; echo "== timing, TP4, B 32, gamma 7, V 32000, R 256, H 1024 (short run; see bench/RESULTS.md for full shapes)"
$MPIRUN "$BENCH" --vocab 32000 --hidden 1024 --rounds 3 --replays 5
