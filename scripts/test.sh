#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs everything: the test tools' system packages (etcd-server for HA masters,
#      iproute2 and nftables for the network-namespace topologies and the loopback check,
#      clang-format), then scripts/install.sh (compiler, runtime libraries, .venv, this
#      package with its test and docs extras);
#   2. lint: ruff check, ruff format --check, mypy (strict, on mooncake_cffi/) and
#      clang-format (.clang-format) on the sources;
#      the shim's C++ engine tests under ASan+UBSan and under TSan;
#   3. the CLI smoke scripts against a local cluster;
#   4. the Python integration suite once more with the shim under ASan;
#   5. the LMCache tier: PyPI lmcache in a virtualenv of its own, cached between runs
#      (scripts/install_lmcache.sh), runs tests/test_lmcache_{upstream_cases,factory,cli,
#      remote_backend}.py
#      (skip with MOONCAKE_CFFI_SKIP_LMCACHE=1);
#   5b. the SGLang tier: PyPI sglang (without its dependencies, plus what its HiCache
#      Mooncake backend imports) in a virtualenv of its own, cached between runs
#      (scripts/install_sglang.sh), runs tests/test_sglang_hicache.py
#      (skip with MOONCAKE_CFFI_SKIP_SGLANG=1);
#   6. the pytest suite against real clusters started by its fixtures;
#   7. the documentation site: mkdocs build --strict (its generated references import the
#      installed package, so they describe this build);
#   8. the wheel: python -m build --wheel, installed into a fresh virtualenv, imported
#      there and `mcl2 --version` run (~2 min);
#   9. the wheel, client and CLI integration tests on the oldest supported Mooncake wheel
#      (and on the newest when it is not the default the suite ran on), in venvs cached
#      by scripts/wheel_venvs.sh (~1 min to build the first time, ~2 min per run).
# Extra arguments go to the final pytest run (e.g. -k lease, -x).
set -uo pipefail
cd "$(dirname "$0")/.."

. scripts/_common.sh
# Test-only system packages; one the archive lacks is reported, and the tests that need it
# skip (saying why) or fail.
tools=()
has_tool etcd || tools+=(etcd-server "HA masters and etcd metadata (tests/test_ha.py, ...)")
{ has_tool ip && has_tool tc && has_tool ss; } ||
    tools+=(iproute2 "network-namespace hosts and the loopback check (ip, tc, ss)")
has_tool nft || tools+=(nftables "link cuts between namespace hosts (nft)")
has_tool clang-format || tools+=(clang-format "the C++ style check of the lint step")
system_install "${tools[@]}" || warn "continuing without them"
MOONCAKE_CFFI_EXTRAS=test,docs ./scripts/install.sh || { echo "install failed" >&2; exit 1; }
export PATH="$PWD/.venv/bin:$PATH"

# Bold only on a terminal, and never when NO_COLOR is set (https://no-color.org).
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
passed=0 failed=0 failures=()
step() {
    local name=$1
    shift
    printf '\n%s==> %s%s\n' "$bold" "$name" "$plain"
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$name"); fi
}

lint() {
    ruff check . && ruff format --check . && mypy &&
        clang-format --dry-run --Werror shim/mcs.h shim/src/*/*.cpp shim/src/*/*.hpp \
            shim/tests/*.cpp shim/tests/*.hpp shim/bench/*.cpp mooncake_cffi/cluster/*.cpp
}
step "lint (ruff check, ruff format --check, mypy, clang-format)" lint
step "shim engine tests (ASan+UBSan)" scripts/sanitize.sh asan
step "shim engine tests (TSan)" scripts/sanitize.sh tsan
step "CLI smoke scripts" tests/smoke/run_all.sh
step "integration tests under ASan" pytest -q -m asan tests/test_asan.py
lmcache_tier() {
    local venv
    venv=$(scripts/install_lmcache.sh | tail -n 1) || return 1
    LMCACHE_DISABLE_BANNER=1 "$venv/bin/pytest" -q -p no:cacheprovider \
        tests/test_lmcache_upstream_cases.py tests/test_lmcache_factory.py tests/test_lmcache_cli.py \
        tests/test_lmcache_remote_backend.py
}
if [ "${MOONCAKE_CFFI_SKIP_LMCACHE:-0}" != 1 ]; then
    step "LMCache tier (lmcache from PyPI)" lmcache_tier
fi
sglang_tier() {
    local venv
    venv=$(scripts/install_sglang.sh | tail -n 1) || return 1
    "$venv/bin/pytest" -q -p no:cacheprovider tests/test_sglang_hicache.py
}
if [ "${MOONCAKE_CFFI_SKIP_SGLANG:-0}" != 1 ]; then
    step "SGLang tier (sglang from PyPI)" sglang_tier
fi
step "pytest suite" pytest -q "$@"

site_build() {
    local dir rc
    dir=$(mktemp -d) || return 1
    NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$dir/site"
    rc=$?
    rm -rf "$dir"
    return $rc
}
step "documentation (mkdocs build --strict)" site_build

wheel_in_fresh_venv() {
    local dir wheels rc=0
    dir=$(mktemp -d) || return 1
    if python -m build --wheel --outdir "$dir/dist" . >"$dir/build.log" 2>&1; then
        wheels=("$dir"/dist/mooncake_cffi-*.whl)
        echo "built ${wheels[0]##*/}"
        python -m venv "$dir/venv" &&
            "$dir/venv/bin/python" -m pip install -q "${wheels[0]}[$(mooncake_wheel)]" &&
            (cd / && "$dir/venv/bin/python" -c \
                'import mooncake_cffi as m; print("imported", m.__version__, "from", m.__file__)') &&
            "$dir/venv/bin/mcl2" --version || rc=1
    else
        tail -n 40 "$dir/build.log"
        rc=1
    fi
    rm -rf "$dir"
    return $rc
}
step "wheel: python -m build, installed into a fresh virtualenv" wheel_in_fresh_venv
step "client and CLI tests on the oldest/newest supported Mooncake wheels" \
    scripts/wheel_venvs.sh --test ends

echo
if [ "$failed" -gt 0 ]; then
    printf 'failed steps: %s\n' "${failures[*]}"
fi
echo "steps: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
