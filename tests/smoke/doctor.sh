#!/usr/bin/env bash
# mcl2 doctor: green on a healthy local cluster; on a master that is not there, a FAIL line
# and exit 1 within the connect timeout; --json parses.
source "$(dirname "$0")/lib.sh"

py() { python3 -c "$1" "${@:2}"; }

expect_status 0 mcl2 doctor
expect_in "$WORK/out" "all checks passed"
grep -q '^FAIL' "$WORK/out" && fail "a FAIL line on a healthy cluster: $(cat "$WORK/out")"
mcl2 doctor --json >"$WORK/doctor.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["ok"] and all(c["status"] == "ok" for c in d["checks"]), d' "$WORK/doctor.json"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(date +%s%N)
expect_status 1 mcl2 --master "127.0.0.1:$port" --connect-timeout 1 doctor
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
expect_in "$WORK/out" "FAIL  master RPC"
[ "$elapsed_ms" -lt 4000 ] || fail "doctor took ${elapsed_ms} ms against a master that is not there"
say "healthy: all ok; master not there: FAIL in ${elapsed_ms} ms"
say "ok"
