#!/usr/bin/env bash
# Builds the drop-in libraries (release): libibverbs.so.1 and librdmacm.so.1,
# and prints the directory that holds both. Use it with unmodified RDMA
# programs:
#   LD_LIBRARY_PATH="$(scripts/build-ibverbs.sh)" ibv_devinfo
#   LD_LIBRARY_PATH="$(scripts/build-ibverbs.sh)" ucmatose -s 127.0.0.1
#   LD_PRELOAD="$(scripts/build-ibverbs.sh)/libibverbs.so.1" ib_write_bw
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p softverbs-ibverbs -p softverbs-rdmacm >&2
dir="$PWD/target/libibverbs"
mkdir -p "$dir"
ln -sf ../release/libibverbs.so "$dir/libibverbs.so.1"
ln -sf ../release/librdmacm.so "$dir/librdmacm.so.1"
# The development names too: programs that dlopen "libibverbs.so" (NCCL tries
# it before libibverbs.so.1) must find the drop-in, not the system's link.
ln -sf ../release/libibverbs.so "$dir/libibverbs.so"
ln -sf ../release/librdmacm.so "$dir/librdmacm.so"
echo "$dir"
