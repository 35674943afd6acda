#!/usr/bin/env bash
# Builds the shim and its C++ engine tests with sanitizers and runs them:
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/sanitize.sh tsan   ThreadSanitizer
# Build trees go to build/asan and build/tsan (meson option -Dshim_tests=true).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan}
case "$kind" in
    asan) sanitize=address,undefined ;;
    tsan) sanitize=thread ;;
    *) echo "usage: scripts/sanitize.sh asan|tsan" >&2; exit 2 ;;
esac
export PATH="$PWD/.venv/bin:$PATH"
dir=build/$kind
if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Dshim_tests=true -Db_sanitize="$sanitize" -Db_lundef=false \
        -Dbuildtype=debugoptimized -Dwerror=true >/dev/null
fi
ninja -C "$dir" >/dev/null
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
"$dir/shim/test_engine"
"$dir/shim/test_batch_data"
"$dir/shim/test_replica_parts"
"$dir/shim/test_trust"
"$dir/shim/test_lane_stop"
"$dir/shim/test_cpus"
"$dir/shim/test_crc32c"
"$dir/shim/test_integrity"
