#!/bin/bash
# On a machine with several GPUs (nvidia-h200-x2, -x4 or -x8), from the repository root: issue 20's runs.
#   scripts/device_multi.sh test    build; the topology; the CUDA oracle tests whose TP cases run at every TP
#                                   size the GPUs allow (one process per GPU under mpirun, and one process
#                                   driving them all), with DSPARK_CUDA_TP_UNVERIFIED=1; the NCCL head tests
#   scripts/device_multi.sh bench   build; a random Qwen3-8B target and draft; bench_spec at TP 1 and at every
#                                   TP size the GPUs allow (TPS, default 2 4 8 up to the GPU count), both
#                                   forms, with the Markov head's paths and broadcast (HEADS: "path:on|off ...",
#                                   default "auto:on replicated:on sharded:off"), the collectives alone and
#                                   each rank's memory; peak per rank in the tables' last line
# Logs go to $OUT; the summary is printed. PREBUILT=1 runs the binaries built on the CPU machine instead of a build
# (`NEW_TARGETS="dspark_tool target_driver draft_driver test_cuda_nccl bench_spec" scripts/prebuild.sh DIR` with
# DIR configured -DDSPARK_CUDA=on -DDSPARK_SHARED=ON; carry build-cuda/pre.tgz).
set -u
MODE=${1:-test}
source scripts/device_env.sh
export DSPARK_CUDA_TP_UNVERIFIED=1
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
{ nvidia-smi -L; nvidia-smi topo -m; } > "$OUT/topo.txt" 2>&1
stamp "$NGPU GPUs"; sed -n '/GPU0/,/^$/p' "$OUT/topo.txt" | head -12

export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:/usr/local/cuda/lib
if ! unpack_prebuilt; then
  stamp "configure + build"
  { cmake -S . -B build-gpu -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release &&
    cmake --build build-gpu -j32; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
fi

if [ "$MODE" = test ]; then
  export DSPARK=$PWD/build-gpu/dspark
  for t in "test_qwen3.py --driver build-gpu/tests/target_driver --only tp --only tp_process" \
           "test_dspark.py --driver build-gpu/tests/draft_driver --only tp" \
           "test_speculative.py --only greedy"; do
    name=${t%%.py*}
    stamp "$name (cuda)"
    timeout 400 python3 tests/oracle/$t --backend cuda > "$OUT/$name.log" 2>&1; echo "rc=$?"
    grep -E "FAIL|not run|passed|FAILED|in one process|TP ?[0-9]" "$OUT/$name.log" | head -20
  done
  stamp "test_cuda_nccl"
  timeout 200 build-gpu/tests/test_cuda_nccl > "$OUT/nccl.log" 2>&1; echo "rc=$?"
  grep -E "^\[ *(FAILED|PASSED|ERROR) *\]" "$OUT/nccl.log" | head -6
  stamp done
  exit 0
fi

stamp "random Qwen3-8B target and draft"
{ python3 bench/hf_peer_target.py --make /tmp/t8 --shape qwen3-8b &&
  python3 bench/hf_peer_target.py --make-draft /tmp/t8 /tmp/d8; } > "$OUT/make.log" 2>&1 || { tail "$OUT/make.log"; exit 1; }
SPEC="build-gpu/bench/bench_spec --model /tmp/t8 --draft /tmp/d8 --backend cuda --context 1024 --batch 1,32"
stamp "TP 1"
timeout 200 $SPEC > "$OUT/spec_tp1.log" 2>&1; grep -E "^\||^memory" "$OUT/spec_tp1.log" | head -16
for tp in ${TPS:-2 4 8}; do
  [ "$tp" -le "$NGPU" ] || continue
  for h in ${HEADS:-auto:on replicated:on sharded:off}; do
    path=${h%%:*} bc=${h##*:}
    stamp "TP $tp under mpirun, head $path, broadcast $bc"
    timeout 240 mpirun --allow-run-as-root -np "$tp" $SPEC --path "$path" --broadcast "$bc" \
      > "$OUT/spec_tp${tp}_mpi_$path$bc.log" 2>&1; echo "rc=$?"
    grep -E "^\||^memory" "$OUT/spec_tp${tp}_mpi_$path$bc.log" | head -24
  done
  stamp "TP $tp in one process"
  timeout 240 $SPEC --tp "$tp" > "$OUT/spec_tp${tp}_one.log" 2>&1; echo "rc=$?"
  grep -E "^\||^memory" "$OUT/spec_tp${tp}_one.log" | head -24
done
rm -rf /tmp/t8 /tmp/d8
stamp done
