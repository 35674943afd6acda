#!/usr/bin/env bash
# cluster up is idempotent, status answers, down stops exactly what up started, and with no
# cluster the data commands say what to do.
source "$(dirname "$0")/lib.sh"

expect_status 0 mcl2 cluster up
expect_in "$WORK/out" "already running"
expect_status 0 mcl2 cluster status
expect_in "$WORK/out" "running, healthy"
pids=$(python3 -c 'import json,sys; print(*json.load(open(sys.argv[1]))["pids"].values())' \
    "$MCL2_STATE_DIR/state.json")

# an unreachable master fails fast, naming its address
metadata=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata_server"])' \
    "$MCL2_STATE_DIR/state.json")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(date +%s%N)
expect_status 1 mcl2 --master "127.0.0.1:$port" --metadata-server "$metadata" exists anything
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_in "$WORK/err" "127.0.0.1:$port"
[ "$elapsed_ms" -lt 5000 ] || fail "unreachable master took ${elapsed_ms} ms"
say "unreachable master: exit 1 after ${elapsed_ms} ms, naming 127.0.0.1:$port"

expect_status 0 mcl2 cluster down
expect_in "$WORK/out" "stopped"
sleep 0.2
for pid in $pids; do
    if [ -e "/proc/$pid" ] && ! grep -q '^State:.*[ZX]' "/proc/$pid/status" 2>/dev/null; then
        fail "process $pid still runs after cluster down"
    fi
done
expect_status 1 mcl2 cluster status
expect_status 1 mcl2 exists anything
expect_in "$WORK/err" "no local cluster"
say "up (idempotent), status, down"

say "ok"
