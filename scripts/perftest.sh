#!/usr/bin/env bash
# Benchmark: Debian's unmodified perftest programs through the drop-in
# libibverbs.so.1, server and client as two processes on this host, with
# iperf3 TCP loopback, the UDP ceiling (scripts/udp-ceiling.c) and the
# same-host ceiling (scripts/shm-ceiling.c) measured in the same go as the
# baselines; ends with the
# figures of the performance targets (spec/performance.md) beside the targets:
# the UDP path (SOFTVERBS_SHM=0) and the same-host path (SOFTVERBS_SHM=1).
# Installs what it runs (perftest, iperf3, gcc) when they are missing.
# Not a test: nothing here gates anything; timings on a shared machine are noisy,
# so read the ratios (measured in the same run) rather than the absolute values.
# PERFTEST_ROUNDS=N (default 1) measures everything N times, round after round
# (the baselines too), and the figures at the end are the medians: on two
# cores single runs move by 2-3x with where the scheduler puts the busy threads.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-packages.sh perftest iperf3 gcc
# PERFTEST_LIB: a directory holding an already built libibverbs.so.1 (to
# compare two builds, alternated); PERFTEST_PORT: the first TCP port less one.
lib="${PERFTEST_LIB:-$(scripts/build-ibverbs.sh)}"
port="${PERFTEST_PORT:-19500}"
rounds="${PERFTEST_ROUNDS:-1}"
declare -A ROW # "name args" -> the client's result rows, one per round

shm=0 # SOFTVERBS_SHM of both ends: 0 the UDP path, 1 the same-host path
run_pair() { # name args...: prints and records the client's result row
  local name=$1; shift
  port=$((port + 1))
  SOFTVERBS_SHM=$shm LD_LIBRARY_PATH="$lib" timeout 120 "$name" -p "$port" "$@" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(SOFTVERBS_SHM=$shm LD_LIBRARY_PATH="$lib" timeout 120 "$name" -p "$port" "$@" 127.0.0.1 2>&1) || true
  wait "$srv" 2>/dev/null || true
  # The first result row after the header line (" #bytes ..."): a line
  # that starts with a number; a run that printed none failed.
  local row
  row=$(awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' <<<"$out")
  local key="$name${*:+ $*}"
  [[ $shm == 1 ]] && key="shm $key"
  [[ -n "$row" ]] && ROW["$key"]+="$row"$'\n'
  printf '%-26s %s\n' "$key" "${row:-FAILED}"
  # What a failed client said last.
  [[ -n "$row" ]] || tail -n 3 <<<"$out" | sed 's/^/    | /'
}

median() { # numbers, one per line: their median, or empty
  # Blank lines are no numbers: the baselines end in a newline, and a
  # here-string adds one more (counted, they made a baseline of one round
  # half its value, of two rounds the smaller).
  sort -g | awk 'NF { v[++n] = $1 } END { if (n) print (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2) }'
}

typical() { # a floor's line: the figure after "typical"
  awk '{ for (i = 1; i < NF; i++) if ($i == "typical") print $(i + 1) }'
}

field() { # key n: the median over the rounds of field n of the recorded rows, or empty
  awk -v n="$2" 'NF { print $n }' <<<"${ROW[$1]:-}" | median
}

# Bandwidth and message rate run for a duration (-D): perftest's default 5 000
# iterations take about 10 ms at 64 B, which measures the start, not the rate.
secs="${PERFTEST_SECONDS:-2}"
latn="-n 10000"
tcps="" floors="" spins_udp="" spins_rc="" spins_gso="" spins_mem="" udps="" roces="" shms="" # the baselines of every round, one per line
for round in $(seq "$rounds"); do
  [[ $rounds -gt 1 ]] && echo "===== round $round of $rounds"
  shm=0
  echo "== iperf3 TCP loopback (3 s)"
  if command -v iperf3 >/dev/null; then
    iperf3 -s -1 -p 19499 >/dev/null 2>&1 &
    isrv=$!
    sleep 0.5
    bps=$(timeout 20 iperf3 -c 127.0.0.1 -p 19499 -t 3 -J 2>/dev/null |
      awk '/"sum_received"/ { s = 1 } s && /"bits_per_second"/ { gsub(/[,]/, ""); print $2; exit }') || true
    wait "$isrv" 2>/dev/null || true
    if [[ -n "$bps" ]]; then
      mib=$(awk -v b="$bps" 'BEGIN { printf "%.1f", b / 8 / 1048576 }')
      tcps+="$mib"$'\n'
      echo "iperf3                 $mib MiB/s"
    else
      echo "iperf3 gave no result"
    fi
  else
    echo "iperf3 not installed: no baseline (apt-get install -y iperf3)"
  fi

  echo "== the wake-up floor (scripts/wakeup-floor.c): a datagram waking a thread blocked in recv(2) beside one spinning on memory"
  if command -v cc >/dev/null && cc -O2 -pthread -o target/wakeup-floor scripts/wakeup-floor.c 2>/dev/null; then
    timeout 60 target/wakeup-floor 19497 19498 3000 0 &
    fsrv=$!
    sleep 0.1
    fout=$(timeout 60 target/wakeup-floor 19498 19497 3000 1) || true
    wait "$fsrv" 2>/dev/null || true
    echo "${fout:-no result}"
    floors+="$(typical <<<"$fout")"$'\n'
  else
    echo "no C compiler: no floor (apt-get install -y gcc)"
  fi

  echo "== the spinning floors (scripts/pingpong-floor.c): a token between two processes that spin for it, by UDP (alone; with an ACK of the token in one sendmmsg: RC's shape; and as softverbs sends that pair, one GSO message read as one GRO buffer) and by shared memory"
  if command -v cc >/dev/null && cc -O2 -o target/pingpong-floor scripts/pingpong-floor.c 2>/dev/null; then
    pout=$(timeout 60 target/pingpong-floor udp 10000 19494) || true
    echo "${pout:-no result}"
    spins_udp+="$(typical <<<"$pout")"$'\n'
    pout=$(timeout 60 target/pingpong-floor udp-rc 10000 19494) || true
    echo "${pout:-no result}"
    spins_rc+="$(typical <<<"$pout")"$'\n'
    pout=$(timeout 60 target/pingpong-floor udp-gso 10000 19494) || true
    echo "${pout:-no result}"
    spins_gso+="$(typical <<<"$pout")"$'\n'
    pout=$(timeout 60 target/pingpong-floor memory 100000) || true
    echo "${pout:-no result}"
    spins_mem+="$(typical <<<"$pout")"$'\n'
  else
    echo "no C compiler: no floor (apt-get install -y gcc)"
  fi

  echo "== the UDP ceiling (scripts/udp-ceiling.c): RoCEv2-sized datagrams through UDP GSO/GRO, no protocol work"
  if command -v cc >/dev/null && cc -O2 -o target/udp-ceiling scripts/udp-ceiling.c 2>/dev/null; then
    uout=$(timeout 30 target/udp-ceiling 19496 2) || true
    echo "${uout:-no result}"
    udps+="$(awk '/received/ { print $1 }' <<<"$uout")"$'\n'
    echo "== the RoCEv2 floor on UDP (udp-ceiling.c roce): the same, with the ICRC computed by the sender and checked by the receiver, and the payload placed"
    uout=$(timeout 30 target/udp-ceiling 19496 2 roce) || true
    echo "${uout:-no result}"
    roces+="$(awk '/received/ { print $1 }' <<<"$uout")"$'\n'
  else
    echo "no C compiler: no ceiling (apt-get install -y gcc)"
  fi

  echo "== the UDP path (SOFTVERBS_SHM=0)"
  echo "== bandwidth, $secs s each (#bytes #iterations BW_peak[MB/s] BW_average[MB/s] MsgRate[Mpps])"
  run_pair ib_write_bw -D "$secs"
  run_pair ib_read_bw -D "$secs"
  run_pair ib_send_bw -D "$secs"
  run_pair ib_write_bw -s 64 -D "$secs"
  run_pair ib_atomic_bw -D "$secs"
  # 10 000 iterations (perftest's default is 1 000): a p99 of 1 000 is
  # the tenth worst, a tail a single preemption moves.
  echo "== latency, 10 000 iterations (#bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec])"
  for t in ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do run_pair "$t" $latn; done
  echo "== the same-host ceiling (scripts/shm-ceiling.c): two copies per byte through a shared ring, no protocol work"
  if command -v cc >/dev/null && cc -O2 -o target/shm-ceiling scripts/shm-ceiling.c 2>/dev/null; then
    sout=$(timeout 30 target/shm-ceiling "$secs") || true
    echo "${sout:-no result}"
    shms+="$(awk '/received/ { print $1 }' <<<"$sout")"$'\n'
  else
    echo "no C compiler: no ceiling (apt-get install -y gcc)"
  fi
  echo "== the same-host path (SOFTVERBS_SHM=1, spec/same-host.md)"
  shm=1
  for t in ib_write_bw ib_read_bw ib_send_bw; do run_pair "$t" -D "$secs"; done
  run_pair ib_write_bw -s 64 -D "$secs"
  run_pair ib_atomic_bw -D "$secs"
  for t in ib_write_lat ib_send_lat; do run_pair "$t" $latn; done
done
tcp_mib=$(median <<<"$tcps")     # MiB/s, as perftest's MB/s (2^20 bytes)
floor=$(median <<<"$floors")     # us, one way
spin_udp=$(median <<<"$spins_udp") # us, one way
spin_rc=$(median <<<"$spins_rc") # us, one way
spin_gso=$(median <<<"$spins_gso") # us, one way
spin_mem=$(median <<<"$spins_mem") # us, one way
echo "== threads on one device (softverbs perf --threads, 3 rounds; spec/concurrency.md §3)"
threads_out=$(cargo build -q --release -p softverbs-cli >&2 \
  && timeout 300 target/release/softverbs perf --threads --rounds 3 --iters 10000 2>&1) || true
echo "${threads_out:-no result}"
# The "vs 1 thread" column (the median over the rounds of each round's
# ratio) of the row of two threads, and of four.
vs_one() { awk -v t="$1" '$1 == t && $NF ~ /x$/ { sub(/x$/, "", $NF); print $NF }' <<<"$threads_out"; }

udp_mib=$(median <<<"$udps")     # MiB/s received
roce_mib=$(median <<<"$roces")   # MiB/s received
shm_mib=$(median <<<"$shms")     # MiB/s received

ratio() { # a b: a / b to 3 places, or "-"
  if [[ -n "$1" && -n "$2" ]]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; else echo -; fi
}
orx() { [[ -n "$1" ]] && echo "$1" || echo -; }

echo
of=""
[[ $rounds -gt 1 ]] && of=" (each figure the median of $rounds rounds; a ratio is of the medians)"
echo "== performance targets (spec/performance.md), measured in this run$of"
printf '  %-44s %10s %-5s %10s\n' figure measured "" target
row() { printf '  %-44s %10s %-5s %10s\n' "$@"; }
row "ib_write_bw 64 KiB / iperf3 TCP" "$(ratio "$(field "ib_write_bw -D $secs" 4)" "$tcp_mib")" x ">= 1.0"
row "ib_read_bw 64 KiB / iperf3 TCP" "$(ratio "$(field "ib_read_bw -D $secs" 4)" "$tcp_mib")" x ">= 1.0"
row "ib_send_bw 64 KiB / iperf3 TCP" "$(ratio "$(field "ib_send_bw -D $secs" 4)" "$tcp_mib")" x ">= 1.0"
row "the UDP ceiling / iperf3 TCP" "$(ratio "$udp_mib" "$tcp_mib")" x ""
row "ib_write_bw 64 KiB / the UDP ceiling" "$(ratio "$(field "ib_write_bw -D $secs" 4)" "$udp_mib")" x ""
row "ib_read_bw 64 KiB / the UDP ceiling" "$(ratio "$(field "ib_read_bw -D $secs" 4)" "$udp_mib")" x ""
row "ib_send_bw 64 KiB / the UDP ceiling" "$(ratio "$(field "ib_send_bw -D $secs" 4)" "$udp_mib")" x ""
row "the RoCEv2 floor on UDP / iperf3 TCP" "$(ratio "$roce_mib" "$tcp_mib")" x ""
row "ib_write_bw 64 KiB / the RoCEv2 floor" "$(ratio "$(field "ib_write_bw -D $secs" 4)" "$roce_mib")" x ""
row "ib_read_bw 64 KiB / the RoCEv2 floor" "$(ratio "$(field "ib_read_bw -D $secs" 4)" "$roce_mib")" x ""
row "ib_send_bw 64 KiB / the RoCEv2 floor" "$(ratio "$(field "ib_send_bw -D $secs" 4)" "$roce_mib")" x ""
row "ib_write_lat 2 B typical" "$(orx "$(field "ib_write_lat $latn" 5)")" us "<= 5"
row "ib_write_lat 2 B p99" "$(orx "$(field "ib_write_lat $latn" 8)")" us "<= 25"
row "ib_write_lat typical / the wake-up floor" "$(ratio "$(field "ib_write_lat $latn" 5)" "$floor")" x ""
row "the spinning UDP floor (one way)" "$(orx "$spin_udp")" us ""
row "ib_write_lat typical / the spinning UDP floor" "$(ratio "$(field "ib_write_lat $latn" 5)" "$spin_udp")" x ""
row "the UDP floor with an ACK per token (one way)" "$(orx "$spin_rc")" us ""
row "ib_write_lat typical / the floor with ACKs" "$(ratio "$(field "ib_write_lat $latn" 5)" "$spin_rc")" x ""
row "the floor of softverbs' own turn (one way)" "$(orx "$spin_gso")" us ""
row "ib_write_lat typical / the floor of its turn" "$(ratio "$(field "ib_write_lat $latn" 5)" "$spin_gso")" x ""
row "ib_send_lat 2 B typical" "$(orx "$(field "ib_send_lat $latn" 5)")" us "<= 5"
row "ib_send_lat 2 B p99" "$(orx "$(field "ib_send_lat $latn" 8)")" us "<= 25"
row "ib_write_bw -s 64 message rate" "$(orx "$(field "ib_write_bw -s 64 -D $secs" 5)")" Mpps ">= 2"
row "ib_atomic_bw message rate" "$(orx "$(field "ib_atomic_bw -D $secs" 5)")" Mpps ">= 1"
row "same host: ib_write_bw 64 KiB / iperf3 TCP" "$(ratio "$(field "shm ib_write_bw -D $secs" 4)" "$tcp_mib")" x ">= 3"
row "same host: ib_read_bw 64 KiB / iperf3 TCP" "$(ratio "$(field "shm ib_read_bw -D $secs" 4)" "$tcp_mib")" x ">= 3"
row "same host: ib_send_bw 64 KiB / iperf3 TCP" "$(ratio "$(field "shm ib_send_bw -D $secs" 4)" "$tcp_mib")" x ">= 3"
row "the same-host ceiling / iperf3 TCP" "$(ratio "$shm_mib" "$tcp_mib")" x ""
for t in ib_write_bw ib_read_bw ib_send_bw; do
  row "same host: $t 64 KiB / the same-host ceiling" "$(ratio "$(field "shm $t -D $secs" 4)" "$shm_mib")" x ""
done
row "same host: ib_write_bw -s 64 message rate" "$(orx "$(field "shm ib_write_bw -s 64 -D $secs" 5)")" Mpps ">= 2"
row "same host: ib_atomic_bw message rate" "$(orx "$(field "shm ib_atomic_bw -D $secs" 5)")" Mpps ">= 1"
row "same host: ib_write_lat 2 B typical" "$(orx "$(field "shm ib_write_lat $latn" 5)")" us "<= 2"
row "the memory floor (one way)" "$(orx "$spin_mem")" us ""
row "same host: ib_send_lat 2 B typical / p99" "$(orx "$(field "shm ib_send_lat $latn" 5)") / $(orx "$(field "shm ib_send_lat $latn" 8)")" us ""
row "threads: 2 threads / 1 thread, one device" "$(orx "$(vs_one 2)")" x "> 1 (grows)"
row "threads: 4 threads / 1 thread (2 cores)" "$(orx "$(vs_one 4)")" x ""
