#!/usr/bin/env bash
# Builds the drop-in libibverbs.so.1 (release) and prints the directory that
# holds it. Use it with unmodified RDMA programs:
#   LD_LIBRARY_PATH="$(scripts/build-ibverbs.sh)" ibv_devinfo
#   LD_PRELOAD="$(scripts/build-ibverbs.sh)/libibverbs.so.1" ib_write_bw
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p softverbs-ibverbs >&2
dir="$PWD/target/libibverbs"
mkdir -p "$dir"
ln -sf ../release/libibverbs.so "$dir/libibverbs.so.1"
echo "$dir"
