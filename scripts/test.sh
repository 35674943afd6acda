#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs everything (scripts/install.sh: system libs, .venv, this package);
#   2. the shim's C++ engine tests under ASan+UBSan and under TSan;
#   3. the CLI smoke scripts against a local cluster;
#   4. the Python integration suite once more with the shim under ASan;
#   5. the pytest suite against real clusters started by its fixtures;
#   6. the wheel, client and CLI integration tests on the oldest supported Mooncake wheel
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

step "shim engine tests (ASan+UBSan)" scripts/sanitize.sh asan
step "shim engine tests (TSan)" scripts/sanitize.sh tsan
step "CLI smoke scripts" tests/smoke/run_all.sh
step "integration tests under ASan" pytest -q -m asan tests/test_asan.py
step "pytest suite" pytest -q "$@"
step "client and CLI tests on the oldest/newest supported Mooncake wheels" \
    scripts/wheel_venvs.sh --test ends

echo
if [ "$failed" -gt 0 ]; then
    printf 'failed steps: %s\n' "${failures[*]}"
fi
echo "steps: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
