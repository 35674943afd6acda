# Shared by the smoke scripts (sourced, not run): strict mode, a private state directory
# and a local cluster that is always brought down, and small assertion helpers.
# Everything stays on 127.0.0.1.  `mcl2` must be on PATH.
set -euo pipefail

SMOKE_NAME=$(basename "$0" .sh)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcl2-smoke-$SMOKE_NAME.XXXXXX")
export MCL2_STATE_DIR="$WORK/state"
# Only the local cluster: no MCL2_* connection settings from the caller's environment.
unset MCL2_MASTER MCL2_METADATA_SERVER MCL2_CONFIG MCL2_PROTOCOL MCL2_HOSTNAME

cleanup() {
    local status=$?
    mcl2 cluster down >/dev/null 2>&1 || true
    if [ "$status" -ne 0 ]; then
        echo "$SMOKE_NAME: FAILED (status $status); cluster logs:" >&2
        tail -n 20 "$MCL2_STATE_DIR"/*.log >&2 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT

say() { printf '%s: %s\n' "$SMOKE_NAME" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

# expect_status N CMD...: run CMD (stdout to $WORK/out, stderr to $WORK/err) and require
# exit status N.
expect_status() {
    local want=$1 got=0
    shift
    "$@" >"$WORK/out" 2>"$WORK/err" || got=$?
    if [ "$got" -ne "$want" ]; then
        say "stdout: $(head -c 2000 "$WORK/out")"
        say "stderr: $(head -c 2000 "$WORK/err")"
        fail "'$*' exited with $got, expected $want"
    fi
}

# expect_in FILE TEXT: FILE contains TEXT.
expect_in() {
    grep -qF -- "$2" "$1" || fail "$(basename "$1") lacks '$2': $(head -c 2000 "$1")"
}

command -v mcl2 >/dev/null || fail "mcl2 is not on PATH"
mcl2 cluster up --segment-size 256MB >/dev/null
