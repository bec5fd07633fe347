#!/usr/bin/env bash
# Installs what dspark needs on Debian 12, only what is missing. Idempotent and
# quiet when everything is present, so `make run` and `make test` call it every time.
set -euo pipefail

pkgs="build-essential cmake pkg-config libopenmpi-dev openmpi-bin libjansson-dev libpcre2-dev libutf8proc-dev \
libcmocka-dev clang libclang-rt-14-dev python3 python3-pip"
# Optional: oneDNN is only the CPU product benchmark's peer (bench_matmul is built when it is there).
opt_pkgs="libdnnl-dev"

missing() {
  local out=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || out="$out $p"
  done
  echo "$out"
}
need=$(missing $pkgs)
opt=$(missing $opt_pkgs)
if [ -n "$need$opt" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq # once, before any install
  if [ -n "$need" ]; then
    echo "setup: installing Debian packages:$need"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need >/dev/null
  fi
  for p in $opt; do
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 \
      && echo "setup: installed optional $p" || echo "setup: optional $p is not available; going on without it"
  done
fi

# Tests only: the Python oracle (numpy, ml_dtypes) and the tokenizer's peer (tokenizers), pinned.
PY=${PYTHON:-python3}
PIP_PKGS="numpy==2.4.6 ml_dtypes==0.6.0 tokenizers==0.23.3"
if ! "$PY" - <<'PYEOF' >/dev/null 2>&1
import importlib.metadata as m
want = {"numpy": "2.4.6", "ml_dtypes": "0.6.0", "tokenizers": "0.23.3"}
raise SystemExit(0 if all(m.version(k) == v for k, v in want.items()) else 1)
PYEOF
then
  echo "setup: installing $PIP_PKGS with pip"
  "$PY" -m pip install -q $PIP_PKGS 2>/dev/null || "$PY" -m pip install -q --break-system-packages $PIP_PKGS
fi
