#!/usr/bin/env bash
# Exit statuses of the rough edges: a reader that goes away (141, so pipefail sees it), a
# key that is not UTF-8 (stored as its bytes, no traceback), SIGTERM (143, client cleaned up).
source "$(dirname "$0")/lib.sh"

head -c 20000000 /dev/urandom >"$WORK/big"
mcl2 -q put big "$WORK/big"
status=0
mcl2 get big | head -c 100000 >/dev/null || status=$?
set +o pipefail
mcl2 get big | head -c 100000 >/dev/null
got=${PIPESTATUS[0]}
set -o pipefail
[ "$got" -eq 141 ] || fail "mcl2 get big | head: mcl2 exited $got, not 141"
[ "$status" -ne 0 ] || fail "the truncated pipeline succeeded under pipefail"

echo bytes | mcl2 -q put $'caf\xe9'
expect_status 0 mcl2 exists $'caf\xe9'
[ "$(cat "$WORK/out")" = $'caf\xe9\ttrue' ] || fail "exists printed $(od -c "$WORK/out")"
grep -q Traceback "$WORK/err" && fail "traceback: $(cat "$WORK/err")"
printf 'caf\xe9\n' >"$WORK/keys"
expect_status 0 mcl2 rm --force --keys-from "$WORK/keys"

mkfifo "$WORK/fifo"
(exec 3>"$WORK/fifo"; sleep 20) &
holder=$!
( trap - INT; exec mcl2 put slow - <"$WORK/fifo" 2>"$WORK/term.err" ) &
pid=$!
sleep 2
kill -TERM "$pid"
got=0
wait "$pid" || got=$?
kill "$holder" 2>/dev/null || true
[ "$got" -eq 143 ] || fail "SIGTERM: exit $got, not 143: $(cat "$WORK/term.err")"
expect_in "$WORK/term.err" "terminated (SIGTERM)"
say "EPIPE 141, non-UTF-8 key, SIGTERM 143 ok"
say "ok"
