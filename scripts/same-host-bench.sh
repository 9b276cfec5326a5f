#!/usr/bin/env bash
# Benchmark of the same-host path (spec/same-host.md): Debian's unmodified
# perftest through the drop-in libibverbs.so.1, server and client as two
# processes on this host (both on 127.0.0.1, as perftest runs them), with the
# path off (SOFTVERBS_SHM=0, UDP) and on (SOFTVERBS_SHM=1), ALTERNATED over
# ROUNDS rounds (UDP, path, UDP, path, ...) so both see the same load; iperf3
# TCP loopback measured at the start of each round. Prints every run, then the
# median and range of each figure and of its ratio to TCP, and the load
# average before and after. Needs perftest and iperf3. Not a test: nothing
# here gates anything.
#
# Environment: ROUNDS (default 3), ITERS (default 5000), MODES (default
# "0 1": the SOFTVERBS_SHM values compared), TESTS (default: the three
# bandwidth tests and ib_write_lat), SV_LIB_<mode> (a directory holding
# another build's libibverbs.so.1 for that mode, e.g. SV_LIB_old=/tmp/old with
# MODES="old 1" to compare builds; a mode that is not 0/1 runs with the path
# on), EXTRA (more perftest arguments, e.g. "-m 4096").
set -euo pipefail
cd "$(dirname "$0")/.."
lib="$(scripts/build-ibverbs.sh)"
port=19700
iters=${ITERS:-5000}
rounds=${ROUNDS:-3}
read -r -a modes <<<"${MODES:-0 1}"
read -r -a tests <<<"${TESTS:-ib_write_bw ib_read_bw ib_send_bw ib_write_lat}"
read -r -a extra <<<"${EXTRA:-}"
declare -A VALS # "mode test" -> space-separated values of the figure
TCPS=""

lib_of() { local v="SV_LIB_$1"; echo "${!v:-$lib}"; }
shm_of() { case "$1" in 0 | 1) echo "$1" ;; *) echo 1 ;; esac; }

run_pair() { # mode name args...: prints the client's result row
  local mode=$1 name=$2; shift 2
  local l s
  l="$(lib_of "$mode")" s="$(shm_of "$mode")"
  port=$((port + 1))
  SOFTVERBS_SHM=$s LD_LIBRARY_PATH="$l" timeout 120 "$name" -p "$port" "$@" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(SOFTVERBS_SHM=$s LD_LIBRARY_PATH="$l" timeout 120 "$name" -p "$port" "$@" 127.0.0.1 2>&1) || true
  wait "$srv" 2>/dev/null || true
  awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' <<<"$out"
}

tcp_now() {
  iperf3 -s -1 -p 19699 >/dev/null 2>&1 &
  local isrv=$!
  sleep 0.5
  local bps
  bps=$(timeout 20 iperf3 -c 127.0.0.1 -p 19699 -t 3 -J 2>/dev/null |
    awk '/"sum_received"/ { s = 1 } s && /"bits_per_second"/ { gsub(/[,]/, ""); print $2; exit }') || true
  wait "$isrv" 2>/dev/null || true
  awk -v b="${bps:-0}" 'BEGIN { printf "%.1f", b / 8 / 1048576 }'
}

stats() { # values...: "median [min-max] (n)"
  if [[ $# -eq 0 ]]; then
    echo "-"
    return
  fi
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "-"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3g [%.3g-%.3g] (n=%d)", m, v[1], v[NR], NR }'
}

echo "== start: $(uptime)"
for ((r = 1; r <= rounds; r++)); do
  tcp=$(tcp_now)
  TCPS+=" $tcp"
  echo "-- round $r: iperf3 TCP loopback $tcp MiB/s"
  for t in "${tests[@]}"; do
    for m in "${modes[@]}"; do
      if [[ $t == *_lat ]]; then
        row=$(run_pair "$m" "$t" -s 2 -n "$iters" "${extra[@]}")
        val=$(awk '{ print $5 }' <<<"$row") # t_typical
      else
        row=$(run_pair "$m" "$t" -s 65536 -n "$iters" "${extra[@]}")
        val=$(awk -v tcp="$tcp" '{ if ($4 != "") printf "%.3f", $4 / tcp }' <<<"$row")
      fi
      printf '   mode=%-4s %-13s %s\n' "$m" "$t" "${row:-FAILED}"
      [[ -n "$val" ]] && VALS["$m $t"]+=" $val"
    done
  done
done
echo "== end: $(uptime)"
echo
read -r -a tv <<<"$TCPS"
echo "iperf3 TCP loopback MiB/s: $(stats "${tv[@]}")"
printf '  %-28s' "figure (median [range])"
for m in "${modes[@]}"; do printf ' %-26s' "mode $m"; done
echo
for t in "${tests[@]}"; do
  if [[ $t == *_lat ]]; then label="$t 2 B typical us"; else label="$t 64 KiB / TCP"; fi
  printf '  %-28s' "$label"
  for m in "${modes[@]}"; do
    read -r -a v <<<"${VALS["$m $t"]:-}"
    printf ' %-26s' "$(stats "${v[@]}")"
  done
  echo
done
