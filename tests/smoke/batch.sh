#!/usr/bin/env bash
# A 1,000-key batch from stdin: put, exists, get into a directory, rm; keys given twice in one
# batch are refused.
source "$(dirname "$0")/lib.sh"

N=1000
mkdir -p "$WORK/in"
for i in $(seq 1 $N); do
    printf 'value %d\n' "$i" >"$WORK/in/$i"
    printf 'batch-%d\t%s\n' "$i" "$WORK/in/$i"
done >"$WORK/pairs.tsv"
seq -f 'batch-%g' 1 $N >"$WORK/keys.txt"

expect_status 0 mcl2 put --keys-from - <"$WORK/pairs.tsv"
expect_in "$WORK/err" "stored $N of $N keys"
say "put $N keys from stdin"

expect_status 0 mcl2 exists --keys-from - <"$WORK/keys.txt"
[ "$(grep -c '	true$' "$WORK/out")" -eq $N ] || fail "exists did not report $N keys present"
say "exists: $N present"

mcl2 get --keys-from - -d "$WORK/out-dir" <"$WORK/keys.txt" 2>/dev/null
[ "$(find "$WORK/out-dir" -type f | wc -l)" -eq $N ] || fail "get -d did not write $N files"
for i in 1 500 $N; do
    cmp "$WORK/in/$i" "$WORK/out-dir/batch-$i" || fail "batch-$i differs"
done
say "get -d: $N files"

expect_status 0 mcl2 rm --force --keys-from - <"$WORK/keys.txt"
expect_in "$WORK/err" "removed $N of $N keys"
expect_status 3 mcl2 exists --keys-from - <"$WORK/keys.txt"
[ "$(grep -c '	false$' "$WORK/out")" -eq $N ] || fail "keys left after rm"
say "rm: $N removed"

expect_status 2 mcl2 put "dup=$WORK/in/1" "dup=$WORK/in/2"
say "ok"
