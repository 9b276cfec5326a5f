#!/usr/bin/env bash
# Benchmark of several processes on one address (crates/io/src/share.rs):
# perftest's ib_send_lat and ib_write_bw through the drop-in libibverbs.so.1,
# client on one loopback address, server on another, in three arrangements:
#   alone      the server is the only process on its address
#   steered    two more processes share the server's address (socket index = slot)
#   forwarded  the server's datagrams reach it through another process: a member
#              in slot 0 left and a newcomer took slot 0 as the last socket, so
#              the kernel steers the server's slot to the newcomer, which forwards
# With BASELINE_LIB=<dir of another libibverbs.so.1> (e.g. a build from before
# address sharing) the 'alone' case is also run with it.
# Needs: perftest (apt-get install -y perftest).
set -euo pipefail
cd "$(dirname "$0")/.."
lib="${SOFTVERBS_LIBIBVERBS_DIR:-$(scripts/build-ibverbs.sh)}"
iters="${ITERS:-5000}"
srv_ip=127.0.61.1
cli_ip=127.0.61.2
port=19600
holders=()

hold() { # keeps a device open on $srv_ip: an ibv_rc_pingpong server waiting for a client
  port=$((port + 1))
  SOFTVERBS_ADDR=$srv_ip LD_LIBRARY_PATH="$1" timeout 300 ibv_rc_pingpong -g 0 -p "$port" >/dev/null 2>&1 &
  holders+=($!)
  sleep 0.5
}

release() { # ends the holders this script started, by PID
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  holders=()
}
trap release EXIT

run_pair() { # lib prog args...: the client's result row
  local l=$1 prog=$2; shift 2
  port=$((port + 1))
  SOFTVERBS_ADDR=$srv_ip LD_LIBRARY_PATH="$l" timeout 120 "$prog" -x 0 -p "$port" "$@" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(SOFTVERBS_ADDR=$cli_ip LD_LIBRARY_PATH="$l" timeout 120 "$prog" -x 0 -p "$port" "$@" 127.0.0.1 2>&1) || true
  wait "$srv" 2>/dev/null || true
  awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' <<<"$out"
}

measure() { # label lib
  printf '%-22s ib_send_lat  %s\n' "$1" "$(run_pair "$2" ib_send_lat -n "$iters")"
  printf '%-22s ib_write_bw  %s\n' "$1" "$(run_pair "$2" ib_write_bw -n "$iters")"
}

echo "ib_send_lat: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec]"
echo "ib_write_bw: #bytes #iterations BW_peak BW_average [MB/s] MsgRate [Mpps]"
if [ -n "${BASELINE_LIB:-}" ]; then
  measure "baseline alone" "$BASELINE_LIB"
fi
measure "alone" "$lib"

# steered: slots 0 and 1 taken by holders; the server gets slot 2 = socket 2.
hold "$lib"; hold "$lib"
measure "steered (3 on address)" "$lib"
release

# forwarded: holder A (slot 0, socket 0); then each server of run_pair takes
# slot 1 (socket 1)... A leaves, the server moves to socket 0; newcomer B takes
# slot 0 as socket 1: the server's slot-1 datagrams go to B, which forwards them.
# The server starts inside run_pair, so arrange it with a wrapper per program.
forwarded() { # prog args...
  local prog=$1; shift
  port=$((port + 1))
  local sp=$port
  hold "$lib"; local a=${holders[-1]}
  SOFTVERBS_ADDR=$srv_ip LD_LIBRARY_PATH="$lib" timeout 120 "$prog" -x 0 -p "$sp" "$@" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  kill "$a"; wait "$a" 2>/dev/null || true
  hold "$lib"
  local out
  out=$(SOFTVERBS_ADDR=$cli_ip LD_LIBRARY_PATH="$lib" timeout 120 "$prog" -x 0 -p "$sp" "$@" 127.0.0.1 2>&1) || true
  wait "$srv" 2>/dev/null || true
  release
  awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' <<<"$out"
}
printf '%-22s ib_send_lat  %s\n' "forwarded" "$(forwarded ib_send_lat -n "$iters")"
printf '%-22s ib_write_bw  %s\n' "forwarded" "$(forwarded ib_write_bw -n "$iters")"
