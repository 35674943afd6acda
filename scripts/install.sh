#!/usr/bin/env bash
# Installs mooncake-cffi from this clone on a Debian/Ubuntu machine, idempotently, with
# only what building and running it need:
#   - Python >= 3.10 with its venv module (python3, python3-venv), checked with a clear
#     message: Debian 12 / Ubuntu 22.04 or newer ship one;
#   - a C++20 compiler (g++) for the shim; meson and ninja come from PyPI in the build;
#   - the system libraries Mooncake's wheel links (libibverbs1, libnuma1, libcurl4);
#   - a virtualenv in .venv with this package and the right Mooncake wheel (CPU or CUDA).
# The test tools (etcd, iproute2, nftables, clang-format) are installed by scripts/test.sh.
# A package missing from the distribution's archive is reported with what needs it; the
# others are installed anyway.
#
#   MOONCAKE_CFFI_WHEEL=cpu|cuda  force the Mooncake wheel (default: cuda only
#                                 when the NVIDIA driver's libcuda.so.1 is present)
#   MOONCAKE_CFFI_VENV=DIR        virtualenv location (default: .venv)
#   MOONCAKE_CFFI_EXTRAS=a,b      more extras of this package, e.g. test,docs or metrics
#   PYTHON=python3.11             the Python to build the virtualenv with (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_common.sh

extras=${MOONCAKE_CFFI_EXTRAS:-}
case "$extras" in
    *[!a-z,]*) die "MOONCAKE_CFFI_EXTRAS must be extras separated by commas, e.g. test,docs" ;;
esac

# -- the machine -------------------------------------------------------------------------
arch=$(uname -m)
case "$arch" in
    x86_64) ;;
    aarch64) warn "aarch64: Mooncake publishes wheels for it; mooncake-cffi is tested on x86_64" ;;
    *) die "Mooncake publishes wheels for x86_64 (and aarch64) only; this machine is $arch" ;;
esac
if [ -r /etc/os-release ]; then
    os_id=$(. /etc/os-release && echo "${ID:-}") os_version=$(. /etc/os-release && echo "${VERSION_ID:-}")
    case "$os_id:${os_version%%.*}" in
        debian: | debian:1[2-9] | debian:[2-9][0-9] | ubuntu:2[2-9] | ubuntu:[3-9][0-9]) ;;
        debian:* | ubuntu:*)
            warn "$os_id $os_version is older than the minimum (Debian 12, Ubuntu 22.04): its" \
                "python3 is too old, see below" ;;
        *) warn "${os_id:-this system} is not Debian or Ubuntu: system packages may need installing by hand" ;;
    esac
fi

# -- Python ------------------------------------------------------------------------------
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
    [ -z "${PYTHON:-}" ] || die "PYTHON=$PYTHON: no such command"
    system_install python3 "running and building mooncake-cffi" ||
        die "python3 is needed: install Python 3.10 or newer"
fi
py_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    die "mooncake-cffi needs Python 3.10 or newer (pyproject's requires-python), and" \
        "$(command -v "$python") is $py_version. Debian 11 (3.9) and Ubuntu 20.04 (3.8) are" \
        "too old: use Debian 12 / Ubuntu 22.04 or newer, or install a Python >= 3.10 with its" \
        "venv module and run PYTHON=/path/to/python3.X $0"
fi

# -- system packages: building and running -----------------------------------------------
cxx=${CXX:-c++}
cxx20() { echo 'int main() { return 0; }' | "$1" -std=c++20 -x c++ -o /dev/null - 2>/dev/null; }
need=()
if ! command -v "$cxx" >/dev/null 2>&1 || ! cxx20 "$cxx"; then
    need+=(g++ "building the shim (C++20)")
    cxx=g++
fi
"$python" -c 'import venv, ensurepip' 2>/dev/null ||
    need+=("python$py_version-venv|python3-venv" "the virtualenv (Python's venv and ensurepip)")
has_lib libibverbs.so.1 || need+=(libibverbs1 "Mooncake's wheel (libibverbs.so.1)")
has_lib libnuma.so.1 || need+=(libnuma1 "Mooncake's wheel (libnuma.so.1)")
has_lib libcurl.so.4 || need+=("libcurl4t64|libcurl4" "Mooncake's wheel (libcurl.so.4)")
if [ ${#need[@]} -gt 0 ]; then
    system_install "${need[@]}" || true # checked below: what is still missing decides
fi
command -v "$cxx" >/dev/null 2>&1 && cxx20 "$cxx" ||
    die "no C++20 compiler ($cxx): install g++ 10 or newer (apt-get install g++)"
"$python" -c 'import venv, ensurepip' 2>/dev/null ||
    die "$python has no venv/ensurepip module: install python$py_version-venv (or python3-venv)"
for lib in libibverbs.so.1 libnuma.so.1 libcurl.so.4; do
    has_lib "$lib" || warn "$lib is missing: Mooncake's wheel needs it, so Client() will fail" \
        "until it is installed"
done

# -- the virtualenv and the package ------------------------------------------------------
venv=${MOONCAKE_CFFI_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
    log "creating virtualenv $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi

wheel=$(mooncake_wheel)
spec=".[$wheel${extras:+,$extras}]"
log "installing '$spec' (mooncake-cffi, from $PWD) into $venv"
CXX=$cxx "$venv/bin/python" -m pip install -q "$spec"
venv_py="$(cd "$venv" && pwd)/bin/python"
log "installed: $(cd / && "$venv_py" -c 'import mooncake_cffi; print(mooncake_cffi.__version__)')"
