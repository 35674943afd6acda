#!/usr/bin/env bash
# rm under Mooncake's read lease: refused with an explanation, removed with --force;
# a missing key is fine for rm unless --strict.
source "$(dirname "$0")/lib.sh"

echo "leased value" | mcl2 put leased
mcl2 get leased >/dev/null            # the read takes a ~10 s lease
expect_status 1 mcl2 rm leased
expect_in "$WORK/err" "OBJECT_HAS_LEASE"
expect_in "$WORK/err" "--force"
expect_status 0 mcl2 exists leased
say "rm under a lease: refused, explained"

expect_status 0 mcl2 rm --force leased
expect_in "$WORK/err" "leased: removed"
expect_status 3 mcl2 exists leased
say "rm --force: removed"

expect_status 0 mcl2 rm leased
expect_in "$WORK/err" "absent"
expect_status 3 mcl2 rm --strict leased
say "rm of a missing key: 0, or 3 with --strict"
say "ok"
