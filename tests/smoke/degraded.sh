#!/usr/bin/env bash
# A fault drill from mcl2 alone: kill one of two storage nodes, keep working (one warning
# line), see it in `cluster status`, bring it back with `cluster restart`.
source "$(dirname "$0")/lib.sh"

mcl2 cluster down >/dev/null
mcl2 cluster up --storage-nodes 2 --segment-size 64MB --client-ttl 2 >/dev/null
expect_status 0 mcl2 cluster kill storage1
segments() { mcl2 --json segments 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
for _ in $(seq 40); do [ "$(segments)" = 1 ] && break; sleep 0.5; done
[ "$(segments)" = 1 ] || fail "the master still lists the dead node's segment"

echo degraded | expect_status 0 mcl2 put k
expect_in "$WORK/err" "mcl2: warning: local cluster: storage1 is down"
[ "$(grep -c 'warning' "$WORK/err")" -eq 1 ] || fail "more than one warning: $(cat "$WORK/err")"
expect_status 0 mcl2 -q get k
expect_in "$WORK/out" "degraded"
[ -s "$WORK/err" ] && fail "-q printed on stderr: $(cat "$WORK/err")"
expect_status 1 mcl2 cluster status
expect_in "$WORK/out" "degraded (storage1 down) but serving"
expect_in "$WORK/out" "mcl2 cluster restart storage1"
say "storage1 down: put and get work, one warning, status says degraded"

expect_status 0 mcl2 cluster restart
expect_in "$WORK/err" "restarted storage1"
expect_status 0 mcl2 cluster status
expect_in "$WORK/out" "running, healthy"
say "restarted: healthy"
say "ok"
