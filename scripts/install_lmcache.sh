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
#   LMCACHE_VERSION=X.Y.Z           lmcache release to install (default: 0.5.6); "any": keep
#                                   whichever release the virtualenv holds (the per-release
#                                   runner, scripts/lmcache_releases.py, swaps it)
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
check=1
if [ "$lmcache_version" = any ]; then
    check=0 # whatever it holds is the runner's to judge
    [ -n "${MOONCAKE_CFFI_LMCACHE_VENV:-}" ] || die "LMCACHE_VERSION=any needs MOONCAKE_CFFI_LMCACHE_VENV"
    lmcache_version=$("$venv/bin/python" -c \
        'from importlib.metadata import version; print(version("lmcache"))' 2>/dev/null) ||
        lmcache_version=0.5.6
fi

need_mooncake_libs

if venv_holds "$venv" lmcache "$lmcache_version"; then
    log "reusing $venv (lmcache $lmcache_version)"
else
    log "creating $venv with lmcache $lmcache_version (about 2 minutes, 2 GB)"
    fresh_venv "$venv"
    "$venv/bin/python" -m pip install -q "torch==$torch_version" >&2
    "$venv/bin/python" -m pip install -q "lmcache==$lmcache_version" "torch==$torch_version" >&2
fi

install_package "$venv" lmcache,test
[ $check -eq 0 ] || (cd / && "$venv/bin/python" -W ignore::UserWarning -c \
    'import lmcache, mooncake_cffi.lmcache as m; m.check_lmcache_version()') >&2
echo "$venv"
