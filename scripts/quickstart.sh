#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs mcl2 against a local cluster:
# installs (scripts/install.sh), starts a local Mooncake cluster on 127.0.0.1
# (`mcl2 cluster up`), stores and reads back a value, and shows the cluster.
# The cluster keeps running afterwards; `.venv/bin/mcl2 cluster down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
export PATH="$PWD/.venv/bin:$PATH"

run() { printf '\n$ %s\n' "$*"; "$@"; }

run mcl2 cluster up
printf '\n$ echo "hello from mooncake-cffi" | mcl2 put greeting -\n'
echo "hello from mooncake-cffi" | mcl2 put greeting -
run mcl2 get greeting
run mcl2 exists greeting
head -c 4194304 /dev/urandom >/tmp/mcl2-demo.bin
run mcl2 put --overwrite blob /tmp/mcl2-demo.bin
printf '\n$ mcl2 get blob | cmp - /tmp/mcl2-demo.bin && echo identical\n'
mcl2 get blob | cmp - /tmp/mcl2-demo.bin && echo identical
rm -f /tmp/mcl2-demo.bin
run mcl2 cluster status
cat <<'MSG'

The local cluster is still running. Try:
  export PATH="$PWD/.venv/bin:$PATH"
  mcl2 --help            man mcl2
  mcl2 cluster down      (stops exactly what `mcl2 cluster up` started)
MSG
