#!/usr/bin/env bash
# Installs PyPI's lmcache beside this package in a virtualenv of its own, for the
# lmcache test tier (tests/test_lmcache_*.py run with it) and bench/lmcache_l2.py.
#
# lmcache brings torch, transformers, cupy and more (2 GB with a CPU torch), so the virtualenv is
# kept in a cache directory outside the work tree and reused while it holds the tested
# lmcache version; only this package is reinstalled into it on each run (~30 s).
# torch is installed first at the version whose CPU build lies in pip's local wheel
# directory, so lmcache (which asks for any torch) does not pull a CUDA build.
#
#   MOONCAKE_CFFI_LMCACHE_VENV=DIR  virtualenv location
#                                   (default: ~/.cache/mooncake-cffi/venv-lmcache-<ver>)
#   LMCACHE_VERSION=X.Y.Z           lmcache release to install (default: the tested one)
#   TORCH_VERSION=X.Y.Z             torch release to install first (default 2.13.0)
#   MOONCAKE_CFFI_WHEEL=cpu|cuda    the Mooncake wheel (default as scripts/install.sh)
#   MOONCAKE_CFFI_PACKAGE=FILE      a wheel of this package to install, instead of building one
#                                   from the checkout (scripts/test.sh builds one for all steps)
# Prints the virtualenv's path on its last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/_common.sh

lmcache_version=${LMCACHE_VERSION:-0.5.6}
torch_version=${TORCH_VERSION:-2.13.0}
python=${PYTHON:-python3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mooncake-cffi
venv=${MOONCAKE_CFFI_LMCACHE_VENV:-$cache/venv-lmcache-$lmcache_version}

# The system libraries Mooncake needs come with scripts/install.sh (run it when one is missing).
for lib in libibverbs.so.1 libnuma.so.1 libcurl.so.4; do
    if ! has_lib "$lib"; then ./scripts/install.sh >&2; break; fi
done

installed() {
    "$venv/bin/python" - "$lmcache_version" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version("lmcache") == sys.argv[1] else 1)
PY
}

if [ -x "$venv/bin/python" ] && installed; then
    log "reusing $venv (lmcache $lmcache_version)"
else
    log "creating $venv with lmcache $lmcache_version (about 2 minutes, 2 GB)"
    if [ -e "$venv" ]; then
        [ -f "$venv/pyvenv.cfg" ] || { echo "$venv exists and is no virtualenv" >&2; exit 1; }
        rm -rf "$venv"
    fi
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    "$venv/bin/python" -m pip install -q "torch==$torch_version" >&2
    "$venv/bin/python" -m pip install -q "lmcache==$lmcache_version" "torch==$torch_version" >&2
fi

wheel=$(mooncake_wheel)
package=${MOONCAKE_CFFI_PACKAGE:-.}
if [ "$package" != . ] && [ ! -f "$package" ]; then
    echo "MOONCAKE_CFFI_PACKAGE=$package: no such file" >&2
    exit 1
fi
log "installing '$package[$wheel,lmcache,test]' (mooncake-cffi) into $venv"
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$package" >&2
"$venv/bin/python" -m pip install -q "$package[$wheel,lmcache,test]" >&2
(cd / && "$venv/bin/python" -c 'import lmcache, mooncake_cffi.lmcache as m; m.check_lmcache_version()') >&2
echo "$venv"
