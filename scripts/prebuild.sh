#!/usr/bin/env bash
# Packs sm_90a binaries built on this (GPU-less) machine for `device_check.sh lean` with PREBUILT=1, so a device
# call spends no time building: build-cuda/pre.tgz holds build-gpu/{tests,bench} from NEW and, for an A/B,
# build-old/ from OLD (build directories configured with -DDSPARK_CUDA=on -DCMAKE_BUILD_TYPE=Release; with
# -DDSPARK_SHARED=ON the programs share one libdspark.so, about 8 MB compressed, so a dozen programs of two trees
# fit the carry where four static ones did).
#   scripts/prebuild.sh NEW_BUILD_DIR [OLD_BUILD_DIR]
set -eu
new=${1:?usage: scripts/prebuild.sh NEW_BUILD_DIR [OLD_BUILD_DIR]}
old=${2:-}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pack() { # build dir, name in the archive, targets
  local dir=$1 name=$2; shift 2
  cmake --build "$dir" -j"$(nproc)" --target "$@" > /dev/null
  mkdir -p "$stage/$name/tests" "$stage/$name/bench"
  [ ! -f "$dir/libdspark.so" ] || cp "$dir/libdspark.so" "$stage/$name/" # -DDSPARK_SHARED=ON: the programs' one copy
  for t in "$@"; do
    if [ "$t" = dspark_tool ]; then cp "$dir/dspark" "$stage/$name/"
    elif [ -x "$dir/tests/$t" ]; then cp "$dir/tests/$t" "$stage/$name/tests/"; else cp "$dir/bench/$t" "$stage/$name/bench/"; fi
  done
}
# NEW_TARGETS / OLD_TARGETS trim the archive (the device tool carries 64 MiB in all, the checkout's shipped models
# included: about four binaries of 7.5 MB fit); `h200` mode runs dspark_tool bench_target bench_spec bench_kda
# bench_gemm_small test_ops_cpu, and with fewer carried reports the others' steps as missing files
pack "$new" build-gpu ${NEW_TARGETS:-test_ops_cpu test_cuda_mathf bench_target bench_spec}
[ -z "$old" ] || pack "$old" build-old ${OLD_TARGETS:-test_ops_cpu bench_target bench_spec}
mkdir -p build-cuda
tar -czf build-cuda/pre.tgz -C "$stage" .
ls -la build-cuda/pre.tgz
