#!/usr/bin/env bash
# Where a ping-pong's turn spends its time, step by step (spec/performance.md §33).
#   scripts/stamps.sh PROGRAM [ARGS...]
#   scripts/stamps.sh ib_write_lat -n 200000
#   STAMPS_ENV="SOFTVERBS_SHM=0" scripts/stamps.sh ib_write_lat -n 200000
# It builds the drop-in library with the `stamps` feature (target/stamps),
# runs the unmodified perftest PROGRAM as server and client over 127.0.0.1,
# and prints the client's figure line and, per step (two named points of
# lanes::stamp::Point one thread passed in a row), how often it was taken,
# its median and its 99th percentile, stamps included (40-60 ns each here).
# Needs perftest (apt-get install -y perftest). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { sed -n '2,12p' "$0"; exit 2; }
prog=$1; shift
CARGO_TARGET_DIR=target/stamps cargo build -q --release -p softverbs-ibverbs --features stamps >&2
lib="$PWD/target/stamps/libibverbs"
mkdir -p "$lib"
ln -sf ../release/libibverbs.so "$lib/libibverbs.so.1"
port=$((23000 + RANDOM % 2000))
env ${STAMPS_ENV:-} LD_LIBRARY_PATH="$lib" timeout 120 "$prog" -p "$port" "$@" >/dev/null 2>&1 &
srv=$!
sleep 1
out=$(env ${STAMPS_ENV:-} LD_LIBRARY_PATH="$lib" timeout 120 "$prog" -p "$port" "$@" 127.0.0.1 2>&1) || true
wait "$srv" 2>/dev/null || true
grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' <<<"$out" | tail -n 1 || true
grep '^stamp ' <<<"$out" | sort -t= -k2 -n -r || echo "no stamps (was the library the instrumented one?)"
