#!/usr/bin/env bash
# Runs every smoke script in this directory (each brings its own cluster up and down on
# 127.0.0.1) and ends with the line "N passed, N failed".  Exit status 1 if any failed.
#   tests/smoke/run_all.sh            all of them
#   tests/smoke/run_all.sh lease json  only these
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if ! command -v mcl2 >/dev/null && [ -x "$repo/.venv/bin/mcl2" ]; then
    export PATH="$repo/.venv/bin:$PATH"
fi

if [ $# -gt 0 ]; then
    scripts=()
    for name in "$@"; do scripts+=("$here/${name%.sh}.sh"); done
else
    scripts=()
    for path in "$here"/*.sh; do
        case "$(basename "$path")" in run_all.sh | lib.sh) continue ;; esac
        scripts+=("$path")
    done
fi

passed=0
failed=0
failed_names=()
for script in "${scripts[@]}"; do
    name=$(basename "$script" .sh)
    start=$(date +%s)
    if bash "$script"; then
        passed=$((passed + 1))
        echo "PASS $name ($(($(date +%s) - start)) s)"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        echo "FAIL $name ($(($(date +%s) - start)) s)"
    fi
done
[ $failed -eq 0 ] || echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
