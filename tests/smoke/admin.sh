#!/usr/bin/env bash
# ls, info, segments and metrics against a local cluster holding a few thousand keys, in
# text and --json; exit statuses for nothing matching (0) and a missing key (3).
source "$(dirname "$0")/lib.sh"

py() { python3 -c "$1" "${@:2}"; }

for i in $(seq 1 2000); do printf 'smoke/%05d\t%s\n' "$i" "$WORK/value"; done >"$WORK/pairs"
printf 'twelve bytes' >"$WORK/value"
mcl2 -q put --keys-from "$WORK/pairs"

mcl2 ls smoke/ >"$WORK/ls"
[ "$(wc -l <"$WORK/ls")" -eq 2000 ] || fail "ls listed $(wc -l <"$WORK/ls") keys, not 2000"
sort -c "$WORK/ls" || fail "ls is not sorted"
[ "$(head -1 "$WORK/ls")" = smoke/00001 ] || fail "first key: $(head -1 "$WORK/ls")"
mcl2 ls -l --limit 3 smoke/ >"$WORK/long"
[ "$(cat "$WORK/long")" = "$(printf 'smoke/00001\t12\t1\nsmoke/00002\t12\t1\nsmoke/00003\t12\t1')" ] \
    || fail "ls -l: $(cat "$WORK/long")"
expect_status 0 mcl2 ls nothing-has-this-prefix/
[ ! -s "$WORK/out" ] || fail "ls of nothing printed something"
mcl2 ls --json -l --limit 10 smoke/ >"$WORK/ls.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert len(d) == 10 and d[0] == {"key": "smoke/00001", "size": 12, "replicas": 1}, d' \
    "$WORK/ls.json"

expect_status 3 mcl2 info smoke/00007 smoke/missing
expect_in "$WORK/out" "size      12 B (12 bytes)"
expect_in "$WORK/out" "smoke/missing: not found"
mcl2 info --json smoke/00007 >"$WORK/info.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))["smoke/00007"]
assert d["status"] == "found" and d["size"] == 12 and len(d["replicas"]) == 1, d
assert d["replicas"][0]["status"] == "OK", d' "$WORK/info.json"

mcl2 segments >"$WORK/segments"
expect_in "$WORK/segments" "256.0 MiB"
mcl2 segments --json >"$WORK/segments.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert len(d) == 1 and d[0]["capacity_bytes"] == 256 << 20 and d[0]["status"] == "OK", d' \
    "$WORK/segments.json"

mcl2 metrics >"$WORK/metrics"
expect_in "$WORK/metrics" "keys       2,000"
mcl2 metrics --raw >"$WORK/raw"
expect_in "$WORK/raw" "master_key_count 2000"
mcl2 metrics --json >"$WORK/metrics.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["keys"] == 2000 and d["health"]["status"] == "ok", d' "$WORK/metrics.json"
say "ls, info, segments, metrics ok on 2000 keys"
say "ok"
