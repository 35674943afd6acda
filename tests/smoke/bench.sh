#!/usr/bin/env bash
# mcl2 bench: per-op figures in text and --json, every key it wrote removed, and a prefix
# that holds keys refused; --repeat reads the keys R times, after a warm-up it cleans up.
source "$(dirname "$0")/lib.sh"

py() { python3 -c "$1" "${@:2}"; }

expect_status 0 mcl2 bench --keys 500 --size 4KiB --batch 16 --concurrency 2 --prefix bench/
expect_in "$WORK/out" "removed 500 keys"
for op in put get exists; do grep -q "^$op " "$WORK/out" || fail "no $op row: $(cat "$WORK/out")"; done
[ -z "$(mcl2 ls bench/)" ] || fail "bench left keys behind"

mcl2 bench --keys 64 --size 64KiB --batch 64 --ops put,get --json >"$WORK/bench.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert [r["op"] for r in d["results"]] == ["put", "get"], d
assert all(r["failed"] == 0 and r["mib_per_s"] > 0 for r in d["results"]), d
assert d["removed"] == 64 and d["left_behind"] == 0, d' "$WORK/bench.json"

mcl2 bench --ops exists --keys 16 --batch 16 --repeat 5 --json >"$WORK/repeat.json"
py 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["results"][0]["keys"] == 80 and d["warmup"]["keys"] == 1, d' "$WORK/repeat.json"
[ -z "$(mcl2 ls bench/)" ] || fail "bench left warm-up keys behind"

echo mine | mcl2 put bench/mine
expect_status 1 mcl2 bench --keys 10 --prefix bench/
expect_in "$WORK/err" "already exist under the prefix"
[ "$(mcl2 get bench/mine)" = mine ] || fail "bench touched an existing key"
say "bench ok"
say "ok"
