#!/usr/bin/env bash
# Benchmark of the same-host path (spec/same-host.md): Debian's unmodified
# perftest through the drop-in libibverbs.so.1, server and client as two
# processes on this host (both on 127.0.0.1, as perftest runs them), with the
# path off (SOFTVERBS_SHM=0, UDP) and on (SOFTVERBS_SHM=1), and iperf3 TCP
# loopback measured in the same run; prints the ratios and the load average.
# Needs perftest and iperf3. Not a test: nothing here gates anything.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(scripts/build-ibverbs.sh)"
port=19700
iters=${ITERS:-5000}
declare -A ROW

run_pair() { # shm name args...: records the client's result row
  local shm=$1 name=$2; shift 2
  port=$((port + 1))
  SOFTVERBS_SHM=$shm LD_LIBRARY_PATH="$lib" timeout 120 "$name" -p "$port" "$@" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(SOFTVERBS_SHM=$shm LD_LIBRARY_PATH="$lib" timeout 120 "$name" -p "$port" "$@" 127.0.0.1 2>&1) || true
  wait "$srv" 2>/dev/null || true
  local row
  row=$(awk '/#bytes/ { getline; print; exit }' <<<"$out")
  ROW["$shm $name"]="$row"
  printf 'SHM=%s %-14s %s\n' "$shm" "$name" "${row:-FAILED}"
}
field() { awk -v n="$2" '{ print $n }' <<<"${ROW[$1]:-}"; }
ratio() {
  if [[ -n "$1" && -n "$2" ]]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; else echo -; fi
}

echo "== $(uptime)"
iperf3 -s -1 -p 19699 >/dev/null 2>&1 &
isrv=$!
sleep 0.5
bps=$(timeout 20 iperf3 -c 127.0.0.1 -p 19699 -t 3 -J 2>/dev/null |
  awk '/"sum_received"/ { s = 1 } s && /"bits_per_second"/ { gsub(/[,]/, ""); print $2; exit }') || true
wait "$isrv" 2>/dev/null || true
tcp=$(awk -v b="${bps:-0}" 'BEGIN { printf "%.1f", b / 8 / 1048576 }')
echo "iperf3 TCP loopback   $tcp MiB/s"
for shm in 0 1; do
  for t in ib_write_bw ib_read_bw ib_send_bw; do run_pair "$shm" "$t" -s 65536 -n "$iters"; done
  run_pair "$shm" ib_write_lat -s 2 -n "$iters"
done
echo "== $(uptime)"
echo
printf '  %-34s %12s %12s %10s\n' figure "UDP (SHM=0)" "shm (SHM=1)" target
for t in ib_write_bw ib_read_bw ib_send_bw; do
  printf '  %-34s %12s %12s %10s\n' "$t 64 KiB / iperf3 TCP" \
    "$(ratio "$(field "0 $t" 4)" "$tcp")" "$(ratio "$(field "1 $t" 4)" "$tcp")" ">= 3"
done
printf '  %-34s %12s %12s %10s\n' "ib_write_lat 2 B typical [us]" \
  "$(field "0 ib_write_lat" 5)" "$(field "1 ib_write_lat" 5)" "<= 2"
printf '  %-34s %12s %12s %10s\n' "ib_write_lat 2 B p99 [us]" \
  "$(field "0 ib_write_lat" 8)" "$(field "1 ib_write_lat" 8)" ""
