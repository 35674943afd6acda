#!/usr/bin/env bash
# put --replicas on two storage nodes (two copies, on distinct segments; a shortfall is
# named), and --cluster-id against HA masters on etcd (skipped without etcd).
source "$(dirname "$0")/lib.sh"

field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }

mcl2 cluster down >/dev/null
mcl2 cluster up --storage-nodes 2 --segment-size 64MB >/dev/null
echo "copied" | mcl2 put --replicas 2 two
mcl2 --json info two >"$WORK/info.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["two"]["replicas"]
segs=[x["segment"] for x in r if x["kind"]=="memory"]
assert len(segs)==2 and len(set(segs))==2, r' "$WORK/info.json"
echo "three" | expect_status 0 mcl2 put --replicas 3 three
expect_in "$WORK/err" "three: stored with 2 of 3 replicas"
say "--replicas 2: two copies on distinct segments; 3 on two nodes: shortfall named"
mcl2 cluster down >/dev/null

if ! command -v etcd >/dev/null; then
    say "skip --cluster-id: etcd is not installed"
    say "ok"
    exit 0
fi
mcl2 cluster up --ha --masters 1 --segment-size 64MB >/dev/null
mcl2 --json cluster status >"$WORK/status.json"
master=$(field "$WORK/status.json" master_addr)
metadata=$(field "$WORK/status.json" metadata_server)
id=$(field "$WORK/status.json" cluster_id)
case "$master" in etcd://*) ;; *) fail "HA master address is $master" ;; esac
remote=(--master "$master" --metadata-server "$metadata" --state-dir "$WORK/none")
echo "via etcd" | mcl2 "${remote[@]}" --cluster-id "$id" put ha-key
[ "$(MCL2_CLUSTER_ID="$id" mcl2 "${remote[@]}" get ha-key)" = "via etcd" ] || fail "get ha-key"
expect_status 1 env -u MC_STORE_CLUSTER_ID mcl2 "${remote[@]}" exists ha-key
expect_in "$WORK/err" "--cluster-id ID or MCL2_CLUSTER_ID"
say "--cluster-id / MCL2_CLUSTER_ID reach $master; without it the error names the option"
say "ok"
