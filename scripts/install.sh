#!/usr/bin/env bash
# Installs what mooncake-cffi needs on a fresh Debian/Ubuntu machine, idempotently:
# the system libraries Mooncake's wheel links against, the tools the local
# cluster and its tests use (etcd for HA masters, iproute2 and nftables for the
# network-namespace topologies), a virtualenv in .venv, and this package with
# the right Mooncake wheel (CPU or CUDA) and test tools.
#
#   MOONCAKE_CFFI_WHEEL=cpu|cuda  force the Mooncake wheel (default: cuda only
#                                 when libcuda.so.1 is present)
#   MOONCAKE_CFFI_VENV=DIR        virtualenv location (default: .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "need root (or sudo) to run: $*" >&2; return 1; fi
}

missing_libs=()
for pair in libibverbs.so.1:libibverbs1 libnuma.so.1:libnuma1 libcurl.so.4:libcurl4; do
    lib=${pair%%:*} pkg=${pair##*:}
    ldconfig -p 2>/dev/null | grep -q "$lib" || missing_libs+=("$pkg")
done
# etcd-server: HA masters and etcd metadata; iproute2 (ip, tc, ss) and nftables:
# test topologies and the loopback-only check; clang-format: the C++ style check.
for pair in etcd:etcd-server ip:iproute2 tc:iproute2 ss:iproute2 nft:nftables \
    clang-format:clang-format; do
    tool=${pair%%:*} pkg=${pair##*:}
    if ! command -v "$tool" >/dev/null && ! [ -x "/usr/sbin/$tool" ] && ! [ -x "/usr/bin/$tool" ]; then
        case " ${missing_libs[*]} " in *" $pkg "*) ;; *) missing_libs+=("$pkg") ;; esac
    fi
done
python=${PYTHON:-python3}
need_venv_pkg=0
"$python" -c 'import venv, ensurepip' 2>/dev/null || need_venv_pkg=1
if [ ${#missing_libs[@]} -gt 0 ] || [ $need_venv_pkg -eq 1 ]; then
    pkgs=("${missing_libs[@]}")
    [ $need_venv_pkg -eq 1 ] && pkgs+=(python3-venv)
    log "installing system packages: ${pkgs[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi

venv=${MOONCAKE_CFFI_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
    log "creating virtualenv $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi

wheel=${MOONCAKE_CFFI_WHEEL:-}
if [ -z "$wheel" ]; then
    if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then wheel=cuda; else wheel=cpu; fi
fi
case "$wheel" in cpu|cuda) ;; *) echo "MOONCAKE_CFFI_WHEEL must be cpu or cuda" >&2; exit 2;; esac

log "installing mooncake-cffi[$wheel,test] into $venv"
"$venv/bin/python" -m pip install -q ".[$wheel,test]"
venv_py="$(cd "$venv" && pwd)/bin/python"
log "installed: $(cd / && "$venv_py" -c 'import mooncake_cffi; print(mooncake_cffi.__version__)')"
