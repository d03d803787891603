# Sourced by the benchmark scripts: installs the peers they compare Troupe with.
#   ensure_debian_torch   Debian's python3-torch (1.13) for /usr/bin/python3
#   ensure_pypi_torch     the current PyTorch from PyPI in tools/bench/.venv (git-ignored)
# Peers are never needed to build or test Troupe, only to benchmark it.

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv="$bench_dir/.venv"

bench_log() { printf '[bench] %s\n' "$*" >&2; }

bench_as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    bench_log "need root for: $*"; return 1; fi
}

apt_ensure() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  bench_log "installing ${missing[*]} (apt)"
  DEBIAN_FRONTEND=noninteractive bench_as_root apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive bench_as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_debian_torch() {
  apt_ensure python3-torch && /usr/bin/python3 -c 'import torch' 2>/dev/null
}

# Creates the virtualenv once and installs the newest torch from PyPI into it. The
# default wheel pulls CUDA libraries (a few GB); it runs on the CPU all the same.
ensure_pypi_torch() {
  if [ ! -x "$venv/bin/python" ]; then
    local py=python3
    if ! "$py" -m venv "$venv" 2>/dev/null; then
      apt_ensure python3-venv && /usr/bin/python3 -m venv "$venv" || return 1
    fi
  fi
  "$venv/bin/python" -c 'import torch' 2>/dev/null && return 0
  bench_log "installing torch from PyPI into $venv (large download, once)"
  "$venv/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
  "$venv/bin/pip" install -q torch
}

# Median of the numbers given as arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# a / b as a decimal.
div() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", a / b}'; }

# Extracts a numeric field from a one-line JSON object.
json_field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])[sys.argv[1]])' "$1"; }

# MXNet 1.9.1 (the seed system) in tools/bench/.venv-mxnet; its wheels need numpy < 1.24.
mxnet_venv="$bench_dir/.venv-mxnet"
ensure_mxnet() {
  if [ ! -x "$mxnet_venv/bin/python" ]; then
    python3 -m venv "$mxnet_venv" 2>/dev/null || { apt_ensure python3-venv && /usr/bin/python3 -m venv "$mxnet_venv"; } || return 1
  fi
  "$mxnet_venv/bin/python" -c 'import mxnet' 2>/dev/null && return 0
  bench_log "installing mxnet 1.9.1 from PyPI into $mxnet_venv (once)"
  "$mxnet_venv/bin/pip" install -q "mxnet==1.9.1" "numpy<1.24"
}
