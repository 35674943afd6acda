#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs everything (scripts/install.sh: system libs, .venv, this package);
#   2. lint: ruff check, ruff format --check and clang-format (.clang-format) on the sources;
#      the shim's C++ engine tests under ASan+UBSan and under TSan;
#   3. the CLI smoke scripts against a local cluster;
#   4. the Python integration suite once more with the shim under ASan;
#   5. the LMCache tier: PyPI lmcache in a virtualenv of its own, cached between runs
#      (scripts/install_lmcache.sh), runs tests/test_lmcache_{upstream_cases,factory,cli}.py
#      (skip with MOONCAKE_CFFI_SKIP_LMCACHE=1);
#   6. the pytest suite against real clusters started by its fixtures;
#   7. the wheel, client and CLI integration tests on the oldest supported Mooncake wheel
#      (and on the newest when it is not the default the suite ran on), in venvs cached
#      by scripts/wheel_venvs.sh (~1 min to build the first time, ~2 min per run).
# Extra arguments go to the final pytest run (e.g. -k lease, -x).
set -uo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh || { echo "install failed" >&2; exit 1; }
export PATH="$PWD/.venv/bin:$PATH"

passed=0 failed=0 failures=()
step() {
    local name=$1
    shift
    printf '\n\033[1m==> %s\033[0m\n' "$name"
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$name"); fi
}

lint() {
    ruff check . && ruff format --check . &&
        clang-format --dry-run --Werror shim/mcs.h shim/src/*.cpp shim/src/*.hpp \
            shim/tests/*.cpp mooncake_cffi/cluster/*.cpp
}
step "lint (ruff check, ruff format --check, clang-format)" lint
step "shim engine tests (ASan+UBSan)" scripts/sanitize.sh asan
step "shim engine tests (TSan)" scripts/sanitize.sh tsan
step "CLI smoke scripts" tests/smoke/run_all.sh
step "integration tests under ASan" pytest -q -m asan tests/test_asan.py
lmcache_tier() {
    local venv
    venv=$(scripts/install_lmcache.sh | tail -n 1) || return 1
    LMCACHE_DISABLE_BANNER=1 "$venv/bin/pytest" -q -p no:cacheprovider \
        tests/test_lmcache_upstream_cases.py tests/test_lmcache_factory.py tests/test_lmcache_cli.py
}
if [ "${MOONCAKE_CFFI_SKIP_LMCACHE:-0}" != 1 ]; then
    step "LMCache tier (lmcache from PyPI)" lmcache_tier
fi
step "pytest suite" pytest -q "$@"
step "client and CLI tests on the oldest/newest supported Mooncake wheels" \
    scripts/wheel_venvs.sh --test ends

echo
if [ "$failed" -gt 0 ]; then
    printf 'failed steps: %s\n' "${failures[*]}"
fi
echo "steps: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
