# Sourced on the GPU machine (Ubuntu image without jansson/cmocka headers and
# with NCCL only inside PyTorch's wheels): unpacks the Debian packages carried
# in .devdeps/ into /tmp/devroot and points CMake and pkg-config at them and at
# that NCCL. Here (Debian with the packages installed) it is not needed. It
# also sets up what every device script uses: $OUT (made), stamp, which
# prints a line with the seconds since sourcing, and unpack_prebuilt.
OUT=${OUT:-/tmp/dspark_out}
mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p /tmp/devroot
for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/devroot; done
export PKG_CONFIG_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=/tmp/devroot
export CMAKE_PREFIX_PATH=/tmp/devroot/usr
export LD_LIBRARY_PATH=/tmp/devroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
DSPARK_NCCL_ROOT=$(python3 -c "import importlib.util as u; s=u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0])" 2>/dev/null)
export DSPARK_NCCL_ROOT
export LD_LIBRARY_PATH=$DSPARK_NCCL_ROOT/lib:$LD_LIBRARY_PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The CUDA model oracles "script.py args" in turn (ORACLE_TIMEOUT seconds each, default 300), each log in $OUT,
# the lines matching $1 shown.
cuda_oracles() {
  local pat=$1 t name; shift
  export DSPARK=$PWD/build-gpu/dspark
  for t in "$@"; do
    name=${t%%.py*}
    stamp "$name (cuda)"
    timeout ${ORACLE_TIMEOUT:-300} python3 tests/oracle/$t --backend cuda > "$OUT/$name.log" 2>&1; echo "rc=$?"
    grep -E "$pat" "$OUT/$name.log" | head -20
  done
}

# With PREBUILT=1, the sm_90a binaries built on the CPU machine and carried (build-cuda/pre.tgz: build-gpu/ and, for
# an A/B, build-old/); fails (and leaves neither directory) when there are none or their libraries are missing.
unpack_prebuilt() {
  [ "${PREBUILT:-0}" = 1 ] && [ -f build-cuda/pre.tgz ] || return 1
  stamp "prebuilt binaries (build-cuda/pre.tgz)"
  rm -rf build-gpu build-old && tar -xzf build-cuda/pre.tgz || return 1
  if find build-gpu build-old -type f -perm -u+x 2>/dev/null | xargs ldd 2>/dev/null | grep "not found"; then
    echo "PREBUILT: libraries missing, building"; rm -rf build-gpu build-old; return 1
  fi
}
