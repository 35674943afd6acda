#!/usr/bin/env bash
# --json output of every command that has it, parsed with python; cluster status reports
# health, keys and memory.
source "$(dirname "$0")/lib.sh"

py() { python3 -c "$1" "${@:2}"; }

echo "one" | mcl2 put k1
echo "two" | mcl2 put k2
echo "again" | mcl2 --json put k1 >"$WORK/put.json" 2>/dev/null
py 'import json,sys; d=json.load(open(sys.argv[1])); assert d["k1"]["status"]=="exists", d' \
    "$WORK/put.json"

expect_status 3 mcl2 --json exists k1 k2 missing
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert d == {"k1": True, "k2": True, "missing": False}, d' "$WORK/out"

mcl2 get k1 k2 -d "$WORK/got" --json >"$WORK/get.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["k1"]["status"] == "written" and d["k1"]["bytes"] == 4, d' "$WORK/get.json"

expect_status 3 mcl2 stat --json k1 missing
py 'import json,sys; d=json.load(open(sys.argv[1])); assert d == {"k1": 4, "missing": None}, d' \
    "$WORK/out"

mcl2 rm --force --json k1 missing >"$WORK/rm.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["k1"]["status"] == "removed" and d["missing"]["status"] == "absent", d' "$WORK/rm.json"

mcl2 cluster status --json >"$WORK/status.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["running"] and d["healthy"], d
assert d["key_count"] == 1, d["key_count"]
assert d["memory"]["total_bytes"] == 256 << 20, d["memory"]
assert d["memory"]["used_bytes"] > 0, d["memory"]' "$WORK/status.json"
say "--json parsed for put, exists, get -d, stat, rm, cluster status"
say "ok"
