#!/usr/bin/env bash
# Installs what dspark needs on Debian 12, only what is missing. Idempotent and
# quiet when everything is present, so `make run` and `make test` call it every time.
set -euo pipefail

pkgs="build-essential cmake pkg-config libopenmpi-dev openmpi-bin libjansson-dev \
libcmocka-dev clang libclang-rt-14-dev python3 python3-pip"
# oneDNN is only the benchmark's peer for the CPU product; optional at build time.
opt_pkgs="libdnnl-dev"

missing=""
for p in $pkgs $opt_pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The Python oracle (tests only): numpy and ml_dtypes for the python3 on PATH.
PY=${PYTHON:-python3}
if ! "$PY" -c 'import numpy, ml_dtypes' >/dev/null 2>&1; then
  echo "setup: installing numpy and ml_dtypes with pip"
  "$PY" -m pip install -q numpy ml_dtypes 2>/dev/null \
    || "$PY" -m pip install -q --break-system-packages numpy ml_dtypes
fi
