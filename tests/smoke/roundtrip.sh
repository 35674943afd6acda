#!/usr/bin/env bash
# A random binary file and stdin round-trip through put/get byte for byte; an existing key
# is kept unless --overwrite; a missing key exits with 3.
source "$(dirname "$0")/lib.sh"

head -c 3145728 /dev/urandom >"$WORK/random.bin"   # 3 MiB
mcl2 put blob "$WORK/random.bin"
mcl2 get blob -o "$WORK/back.bin"
[ "$(sha256sum <"$WORK/random.bin")" = "$(sha256sum <"$WORK/back.bin")" ] ||
    fail "get -o returned different bytes"
[ "$(mcl2 get blob | sha256sum)" = "$(sha256sum <"$WORK/random.bin")" ] ||
    fail "get to stdout returned different bytes"
say "3 MiB random file: checksums match"

# stdin to stdout, binary
head -c 65536 /dev/urandom >"$WORK/small.bin"
mcl2 put piped <"$WORK/small.bin"
mcl2 get piped | cmp - "$WORK/small.bin" || fail "stdin -> stdout round trip differs"
printf 'line 1\nline 2\n' | mcl2 put text -
[ "$(mcl2 get text)" = "$(printf 'line 1\nline 2')" ] || fail "text round trip differs"
say "stdin -> stdout: identical"

# first writer wins, --overwrite replaces
expect_status 0 mcl2 put text "$WORK/small.bin"
expect_in "$WORK/err" "text: exists, kept (use --overwrite to replace)"
mcl2 get text | grep -q 'line 2' || fail "an existing key was replaced without --overwrite"
mcl2 put --overwrite text "$WORK/small.bin" 2>/dev/null
mcl2 get text | cmp - "$WORK/small.bin" || fail "--overwrite did not replace the value"
say "existing key kept; --overwrite replaces"

# exit status 3 for a missing key
expect_status 3 mcl2 get no-such-key
expect_in "$WORK/err" "not found"
expect_status 3 mcl2 exists blob no-such-key
expect_in "$WORK/out" "no-such-key	false"
expect_status 0 mcl2 exists blob piped
say "missing key: exit status 3"

# usage errors exit with 2
expect_status 2 mcl2 get
expect_status 2 mcl2 --no-such-option
say "usage errors: exit status 2"
say "ok"
