#!/usr/bin/env bash
# Benchmark: Debian's unmodified perftest programs (default options) through the
# drop-in libibverbs.so.1, server and client as two processes on this host,
# with iperf3 TCP loopback measured in the same go as the baseline.
# Needs: perftest, iperf3 (apt-get install -y perftest iperf3).
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(scripts/build-ibverbs.sh)"
port=19500

run_pair() { # name args...: prints the client's result row
  local name=$1; shift
  port=$((port + 1))
  LD_LIBRARY_PATH="$lib" timeout 120 "$name" -p "$port" "$@" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(LD_LIBRARY_PATH="$lib" timeout 120 "$name" -p "$port" "$@" 127.0.0.1 2>&1) || true
  wait "$srv" 2>/dev/null || true
  # The row after the header line that starts with " #bytes".
  local row
  row=$(awk '/#bytes/ { getline; print; exit }' <<<"$out")
  printf '%-14s %s\n' "$name" "${row:-FAILED}"
}

echo "== iperf3 TCP loopback (3 s)"
if command -v iperf3 >/dev/null; then
  iperf3 -s -1 -p 19499 >/dev/null 2>&1 &
  isrv=$!
  sleep 0.5
  iperf3 -c 127.0.0.1 -p 19499 -t 3 -f M 2>&1 | awk '/receiver/ { print "iperf3         " $7, $8 }'
  wait "$isrv" 2>/dev/null || true
else
  echo "iperf3 not installed: no baseline (apt-get install -y iperf3)"
fi

echo "== bandwidth (perftest defaults: #bytes #iterations BW_peak[MB/s] BW_average[MB/s] MsgRate[Mpps])"
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do run_pair "$t"; done
echo "== latency (perftest defaults: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec])"
for t in ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do run_pair "$t"; done
