#!/usr/bin/env bash
# Builds (or reuses) one virtualenv per Mooncake wheel version, with this package installed,
# and optionally runs tests in each, one venv at a time:
#
#   scripts/wheel_venvs.sh [--test] [--variant cpu|cuda] VERSION...    e.g. 0.3.10.post2 0.3.14
#   scripts/wheel_venvs.sh --test oldest newest                        the supported range's ends
#   scripts/wheel_venvs.sh --test ends      the oldest, and the newest unless it is the default
#                                           (which the full suite already runs on: CI)
#
# Venvs live in $MOONCAKE_CFFI_WHEEL_VENVS (default: ~/.cache/mooncake-cffi/wheel-venvs, kept
# outside the work tree so fresh clones on the same machine reuse them).  A venv that already
# holds the wanted Mooncake wheel is reused; only this package is reinstalled (without
# dependencies, ~30 s; MOONCAKE_CFFI_PACKAGE=FILE installs that wheel of it instead of building
# one from the checkout).  Wheels whose store.so needs libcudart.so.12 get nvidia-cuda-runtime-cu12
# too (mooncake_cffi.wheel loads it).  Versions released only as mooncake-transfer-engine-cuda13
# (CUDA13_ONLY in mooncake_cffi/wheel.py: 0.3.14) get that wheel whatever --variant says, with
# nvidia-cuda-runtime 13 and, where the NVIDIA driver is absent, Debian's libcuda1 (the
# driver's user-space library, non-free) and ibverbs-providers (libmlx5.so.1) unpacked into
# the venv (never installed on the system) and put on LD_LIBRARY_PATH for the tests.  With
# --test, runs $WHEEL_TESTS (default: the client and CLI integration tests) with the venv's
# pytest and prints one line per version; the exit status is non-zero if any version failed.
set -uo pipefail
cd "$(dirname "$0")/.."
src=$PWD

# Bold only on a terminal, and never when NO_COLOR is set (https://no-color.org).
if [ -t 2 ] && [ -z "${NO_COLOR:-}" ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
log() { printf '%s==> %s%s\n' "$bold" "$*" "$plain" >&2; }

root=${MOONCAKE_CFFI_WHEEL_VENVS:-$HOME/.cache/mooncake-cffi/wheel-venvs}
package=${MOONCAKE_CFFI_PACKAGE:-$src}
[ -e "$package" ] || { echo "MOONCAKE_CFFI_PACKAGE=$package: no such file" >&2; exit 2; }
tests=${WHEEL_TESTS:-tests/test_wheel.py tests/test_client.py tests/test_cli.py tests/test_cli_options.py tests/test_cli_console.py}
variant=cpu run_tests=0 versions=()
while [ $# -gt 0 ]; do
    case "$1" in
        --test) run_tests=1 ;;
        --variant) variant=${2:?--variant needs cpu or cuda}; shift ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) versions+=("$1") ;;
    esac
    shift
done
case "$variant" in
    cpu) dist=mooncake-transfer-engine-non-cuda ;;
    cuda) dist=mooncake-transfer-engine ;;
    *) echo "--variant must be cpu or cuda" >&2; exit 2 ;;
esac
[ ${#versions[@]} -gt 0 ] || { echo "usage: $0 [--test] VERSION... (see --help)" >&2; exit 2; }

# The supported range is defined once, in mooncake_cffi/wheel.py.
range_end() {
    python3 - "$1" <<'EOF'
import re, sys
text = open("mooncake_cffi/wheel.py").read()
name = {"oldest": "OLDEST", "newest": "NEWEST", "default": "DEFAULT_VERSION"}[sys.argv[1]]
print(re.search(rf'^{name} = "([^"]+)"', text, re.M).group(1))
EOF
}

# The versions published only as mooncake-transfer-engine-cuda13.
cuda13_only() {
    python3 - "$1" <<'EOF'
import re, sys
text = open("mooncake_cffi/wheel.py").read()
only = re.findall(r'"([^"]+)"', re.search(r"^CUDA13_ONLY = \(([^)]*)\)", text, re.M).group(1))
sys.exit(0 if sys.argv[1] in only else 1)
EOF
}

# The store binding and binaries of the venv's wheel.
mooncake_files() {
    local pkg
    pkg=$("$1/bin/python" -c 'import importlib.util as u; print(list(u.find_spec("mooncake").submodule_search_locations)[0])') || return 1
    ls "$pkg"/store.so "$pkg"/_store.*.so "$pkg/mooncake_master" "$pkg/mooncake_client" 2>/dev/null
}

# Whether the installed wheel's store binding or binaries link libcudart.so.$2 (the "non-cuda"
# 0.3.12, 0.3.12.post1 and 0.3.13 link .12, the cuda13 wheel .13, without shipping it).
needs_cudart() {
    # shellcheck disable=SC2046  # a list of paths
    grep -qs "libcudart\\.so\\.$2" $(mooncake_files "$1")
}

# Debian's libcuda1 (non-free) and ibverbs-providers, unpacked into $venv/debian-libs, for a
# wheel that links libcuda.so.1 on a machine without the NVIDIA driver.  apt-get runs with
# lists of its own under $venv/apt: the system's sources and packages are left alone.
driver_stand_in() {
    local venv=$1 libs=$1/debian-libs apt=$1/apt
    # shellcheck disable=SC2046  # a list of paths
    grep -qs 'libcuda\.so\.1' $(mooncake_files "$venv") || return 0
    /sbin/ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && return 0
    [ -e "$libs/libcuda.so.1" ] && [ -e "$libs/libmlx5.so.1" ] && return 0
    log "no NVIDIA driver here: unpacking Debian's libcuda1 and ibverbs-providers into $libs"
    local codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$libs"
    echo "deb http://deb.debian.org/debian $codename main non-free" >"$apt/sources.list"
    local opts=(-o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=-
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
    apt-get "${opts[@]}" -qq update || return 1
    (cd "$apt" && apt-get "${opts[@]}" -qq download libcuda1 ibverbs-providers) || return 1
    local deb
    for deb in "$apt"/libcuda1_*.deb "$apt"/ibverbs-providers_*.deb; do
        dpkg-deb -x "$deb" "$apt/root" || return 1
    done
    cp -a "$apt"/root/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so* \
        "$apt"/root/usr/lib/x86_64-linux-gnu/libmlx5.so* "$libs/" || return 1
    rm -rf "$apt/root"
}

build() {
    local ver=$1 venv=$2
    if [ ! -x "$venv/bin/python" ]; then
        log "creating $venv"
        python3 -m venv "$venv" || return 1
    fi
    local have
    have=$("$venv/bin/python" -m pip show "$dist" 2>/dev/null | sed -n 's/^Version: //p')
    if [ "$have" != "$ver" ]; then
        log "installing $dist==$ver into $venv"
        "$venv/bin/python" -m pip install -q "$dist==$ver" \
            cffi numpy click pytest pytest-timeout hypothesis prometheus_client meson ninja \
            || return 1
    fi
    # pyproject.toml gives every test a timeout: venvs made before it lack the plugin.
    if ! "$venv/bin/python" -m pip show -q pytest-timeout >/dev/null 2>&1; then
        "$venv/bin/python" -m pip install -q pytest-timeout || return 1
    fi
    if needs_cudart "$venv" 12 && ! "$venv/bin/python" -m pip show -q nvidia-cuda-runtime-cu12 \
        >/dev/null 2>&1; then
        log "Mooncake $ver links libcudart.so.12: installing nvidia-cuda-runtime-cu12"
        "$venv/bin/python" -m pip install -q nvidia-cuda-runtime-cu12 || return 1
    fi
    if needs_cudart "$venv" 13 && ! "$venv/bin/python" -m pip show -q nvidia-cuda-runtime \
        >/dev/null 2>&1; then
        log "Mooncake $ver links libcudart.so.13: installing nvidia-cuda-runtime 13"
        "$venv/bin/python" -m pip install -q 'nvidia-cuda-runtime==13.*' || return 1
    fi
    driver_stand_in "$venv" || return 1
    log "installing this package into $venv (Mooncake $ver)"
    "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$package" || return 1
}

expanded=()
for ver in "${versions[@]}"; do
    if [ "$ver" = ends ]; then
        expanded+=(oldest)
        [ "$(range_end newest)" = "$(range_end default)" ] || expanded+=(newest)
    else
        expanded+=("$ver")
    fi
done
summary=() failed=0
requested=$dist
for ver in "${expanded[@]}"; do
    case "$ver" in oldest|newest) ver=$(range_end "$ver") ;; esac
    dist=$requested kind=$variant
    if cuda13_only "$ver"; then
        dist=mooncake-transfer-engine-cuda13 kind=cuda13
    fi
    venv=$root/$kind-$ver
    mkdir -p "$root"
    if ! build "$ver" "$venv"; then
        summary+=("$ver: venv build FAILED")
        failed=1
        continue
    fi
    [ $run_tests -eq 1 ] || { summary+=("$ver: $venv ready"); continue; }
    log "Mooncake $ver: pytest $tests"
    out=$(mktemp)
    # shellcheck disable=SC2086  # $tests is a list of paths
    # The venv's pytest script (not `python -m pytest`, which would import the source tree).
    libs=${LD_LIBRARY_PATH:-}
    [ -d "$venv/debian-libs" ] && libs=$venv/debian-libs${libs:+:$libs}
    (cd "$src" && PATH="$venv/bin:$PATH" LD_LIBRARY_PATH=$libs timeout 900 \
        "$venv/bin/pytest" -q -p no:cacheprovider $tests) \
        2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[=]* ?[0-9]+ (passed|failed)' "$out" | tail -1 | tr -d '=')
    rm -f "$out"
    summary+=("$ver: ${line:-no result} (exit $rc)")
    [ "$rc" -eq 0 ] || failed=1
done
echo
printf '%s\n' "${summary[@]}"
exit $failed
