#!/usr/bin/env bash
# In-run A/B of two variants of the data path (spec/performance.md §26).
#
# Put the change under test behind `lanes::ab::variant()` (false in every
# normal build: `if lanes::ab::variant() { new } else { old }`), then:
#   scripts/ab.sh RUNS PROGRAM [ARGS...]
#   scripts/ab.sh 8 ib_write_lat -n 300000
#   AB_ENV="SOFTVERBS_SHM=0" scripts/ab.sh 6 ib_atomic_bw -D 3
# It builds the drop-in library with the `ab` feature (target/ab), runs the
# unmodified perftest PROGRAM as server and client RUNS times, and prints
# per run the client's A and B figures (post-to-post intervals: the median
# for a latency program, *_lat, else the mean) and their ratio B/A, then the
# geometric mean of the ratios: below 1, B is faster. Both ends switch
# variant together every 2^26 ns by the wall clock, so the machine's phases
# fall on both alike. A/A (no change behind the flag) gives 0.98-1.02 here.
# Needs perftest (apt-get install -y perftest). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { sed -n '2,16p' "$0"; exit 2; }
runs=$1; prog=$2; shift 2
CARGO_TARGET_DIR=target/ab cargo build -q --release -p softverbs-ibverbs --features ab >&2
lib="$PWD/target/ab/libibverbs"
mkdir -p "$lib"
ln -sf ../release/libibverbs.so "$lib/libibverbs.so.1"
col=mean
[[ $prog == *_lat ]] && col=median
port=$((21000 + RANDOM % 2000))
ratios=""
for i in $(seq "$runs"); do
  port=$((port + 1))
  env ${AB_ENV:-} LD_LIBRARY_PATH="$lib" timeout 120 "$prog" -p "$port" "$@" >/dev/null 2>&1 &
  srv=$!
  sleep 1
  err=$(env ${AB_ENV:-} LD_LIBRARY_PATH="$lib" timeout 120 "$prog" -p "$port" "$@" 127.0.0.1 2>&1 >/dev/null) || true
  wait "$srv" 2>/dev/null || true
  a=$(awk -v c="$col" '$2 == "ab:" && $3 == "A" { for (i = 4; i <= NF; i++) if (index($i, c "=") == 1) print substr($i, length(c) + 2) }' <<<"$err")
  b=$(awk -v c="$col" '$2 == "ab:" && $3 == "B" { for (i = 4; i <= NF; i++) if (index($i, c "=") == 1) print substr($i, length(c) + 2) }' <<<"$err")
  if [[ -z "$a" || -z "$b" ]]; then
    echo "run $i: no figures"; tail -n 3 <<<"$err" | sed 's/^/    | /'; continue
  fi
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b / a }')
  echo "run $i: A $a ns  B $b ns  B/A $r ($col post-to-post)"
  ratios+="$r"$'\n'
done
awk 'NF { s += log($1); n++ } END { if (n) printf "geometric mean of B/A over %d runs: %.3f\n", n, exp(s / n); else print "no runs measured" }' <<<"$ratios"
