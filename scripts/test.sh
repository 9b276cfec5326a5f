#!/usr/bin/env bash
# The full test suite, on a fresh machine: installs the real-world tools the
# tests check against (Debian packages), then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

# tshark: the Wireshark agreement tests; libibverbs-dev (verbs.h): the C-ABI
# layout test; ibverbs-utils, perftest, python3-pyverbs: the unmodified
# programs run on the drop-in libibverbs.so.1; librdmacm-dev (rdma_cma.h) and
# rdmacm-utils: the drop-in librdmacm.so.1's layout test, C program and
# unmodified programs; iproute2: the two-host test in network namespaces;
# binutils: readelf for the export check; ucx-utils: ucx_info/ucx_perftest
# through softverbs exec; openmpi-bin, libopenmpi-dev: an Open MPI job (pml
# ucx) through softverbs exec; util-linux: setpriv and unshare (softverbs exec
# as an unprivileged user); libfabric-bin: fi_info and fi_pingpong (libfabric's
# verbs provider over the drop-in libraries); qperf: its RC tests over the
# drop-in librdmacm (-cm1).
scripts/install-packages.sh tshark libibverbs-dev ibverbs-utils perftest python3-pyverbs \
  librdmacm-dev rdmacm-utils iproute2 binutils ucx-utils openmpi-bin libopenmpi-dev util-linux \
  libfabric-bin qperf

# Tests that compare against external tools fail (instead of skipping) here.
export SOFTVERBS_REQUIRE_TOOLS=1
mkdir -p target
# The drop-in library the real-program tests load (release: perftest's
# default runs move hundreds of megabytes).
echo "== building libibverbs.so.1 and librdmacm.so.1"
SOFTVERBS_LIBIBVERBS_DIR="$(scripts/build-ibverbs.sh)"
export SOFTVERBS_LIBIBVERBS_DIR
echo "== the benchmarks compile (cargo bench runs them; never part of the tests)"
cargo check -q --benches -p softverbs-wire -p softverbs-proto
echo "== cargo test --workspace"
cargo test --workspace --no-fail-fast 2>&1 | tee target/test-output.txt
echo "== the instruments' builds (scripts/ab.sh, scripts/stamps.sh): they compile, their own tests pass"
cargo check -q -p softverbs-ibverbs --features ab,stamps
cargo test -q -p softverbs-lanes --features ab,stamps 2>&1 | tee -a target/test-output.txt
echo "== the C baselines of scripts/perftest.sh compile; udp-ceiling's folded CRC-32 is CRC-32"
for c in scripts/*.c; do cc -O2 -Wall -Werror -o "target/$(basename "$c" .c)" "$c"; done
target/udp-ceiling check
echo "== summary"
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' target/test-output.txt
