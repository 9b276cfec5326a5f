#!/usr/bin/env bash
# Benchmark of the stacks real applications sit on, each on softverbs beside the
# same stack over TCP, in the same run, between two "hosts" (network namespaces
# joined by a veth pair, one process per host unless said):
#   UCX        ucx_perftest tag_lat (8 B) and tag_bw (1 MiB);
#              softverbs: UCX_TLS=rc_verbs,ud_verbs; tcp: UCX_TLS=tcp
#   libfabric  fi_pingpong -e msg, 8 B and 1 MiB; softverbs: -p verbs (rdma_cm);
#              tcp: -p tcp
#   libfabric  fi_pingpong -e rdm; softverbs: -p "verbs;ofi_rxm"; tcp: -p "tcp;ofi_rxm"
#   Open MPI   scripts/mpi-bench.sh (4 ranks, 2 per host; pml ucx on softverbs
#              beside pml ucx over TCP and pml ob1/btl tcp)
# and prints each figure with the ratio softverbs / TCP (latency: > 1 means
# softverbs is slower; bandwidth: < 1 means softverbs is slower).
# Latencies are half round trips in µs (UCX: its median, p50; fi_pingpong and
# the MPI program: the mean); bandwidths in MB/s as each tool reports them.
# Needs root (network namespaces), ucx-utils, libfabric-bin, iproute2,
# util-linux, openmpi-bin and libopenmpi-dev (SKIP_MPI=1 leaves Open MPI out).
# ITERS (default 2000) latency iterations; BW_ITERS (default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
lib="${SOFTVERBS_LIBIBVERBS_DIR:-$(scripts/build-ibverbs.sh)}"
cargo build -q --release -p softverbs-cli >&2
bin="$PWD/target/release/softverbs"
iters="${ITERS:-2000}"
bw_iters="${BW_ITERS:-200}"
tag="svsb$$" addr_a=10.80.0.1 addr_b=10.80.0.2
. scripts/two-hosts.sh
# fi_pingpong 1.17's server names no address: libfabric's verbs provider binds
# "localhost", so in the server's mount namespace localhost is the device's
# address (spec/libfabric.md §2).
echo "$addr_a localhost" >"$work/hosts"

# on HOST softverbs|plain PROGRAM ARGS...: run in HOST's namespace, bounded;
# softverbs: under softverbs exec on the host's address.
on() {
  local host=$1 how=$2; shift 2
  local ns=$nsa addr=$addr_a
  [ "$host" = B ] && ns=$nsb addr=$addr_b
  if [ "$how" = softverbs ]; then
    SOFTVERBS_ADDR=$addr timeout 120 ip netns exec "$ns" unshare --mount sh -c \
      'mount --bind "$0" /etc/hosts && exec "$@"' "$work/hosts" "$bin" exec --lib-dir "$lib" -- "$@"
  else
    timeout 120 ip netns exec "$ns" unshare --mount sh -c \
      'mount --bind "$0" /etc/hosts && exec "$@"' "$work/hosts" "$@"
  fi
}

# pair softverbs|plain SERVER-ARGS -- CLIENT-EXTRA: server on A, client on B
# (the client gets CLIENT-EXTRA appended; retried while A is not listening yet).
pair() {
  local how=$1; shift
  local args=() extra=()
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  shift; extra=("$@")
  on A "$how" "${args[@]}" >"$work/server.out" 2>&1 &
  local spid=$! out="" n
  for n in $(seq 1 20); do
    sleep 0.5
    if out=$(on B "$how" "${args[@]}" "${extra[@]}" 2>&1); then break; fi
    grep -qi "refused" <<<"$out" || break
  done
  wait "$spid" || true
  printf '%s\n' "$out"
}

port=$((20000 + $$ % 20000))
ucx() { # softverbs|tcp TEST SIZE ITERS PORT -> the "Final:" line
  local how=softverbs
  if [ "$1" = softverbs ]; then
    export UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=softverbs0:1
  else
    export UCX_TLS=tcp UCX_NET_DEVICES=all; how=plain
  fi
  pair "$how" ucx_perftest -t "$2" -s "$3" -n "$4" -p "$5" -- "$addr_a" | grep '^Final:' || echo "failed"
}
fabric() { # PROVIDER EP SIZE ITERS -> the result line (bytes #sent #ack total time MB/s usec/xfer Mxfers/s)
  local how=plain
  case $1 in verbs*) how=softverbs ;; esac
  pair "$how" fi_pingpong -p "$1" -e "$2" -S "$3" -I "$4" -- "$addr_a" |
    awk 'NR > 1 && $3 ~ /^=/ { print; found = 1 } END { if (!found) print "failed" }' | tail -1
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
row() { # stack metric softverbs tcp
  printf '%-26s %-10s %12s %12s %8s\n' "$1" "$2" "$3" "$4" "$(ratio "$3" "$4")"
}

echo "Stacks between two hosts (network namespaces), softverbs beside TCP; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-26s %-10s %12s %12s %8s\n' stack metric softverbs tcp ratio

lat_s=$(ucx softverbs tag_lat 8 "$iters" "$port"); lat_t=$(ucx tcp tag_lat 8 "$iters" $((port + 1)))
row "UCX tag (p50)" "lat us" "$(awk '{print $3}' <<<"$lat_s")" "$(awk '{print $3}' <<<"$lat_t")"
row "UCX tag (mean)" "lat us" "$(awk '{print $5}' <<<"$lat_s")" "$(awk '{print $5}' <<<"$lat_t")"
bw_s=$(ucx softverbs tag_bw 1048576 "$bw_iters" $((port + 2)))
bw_t=$(ucx tcp tag_bw 1048576 "$bw_iters" $((port + 3)))
row "UCX tag 1 MiB" "bw MB/s" "$(awk '{print $7}' <<<"$bw_s")" "$(awk '{print $7}' <<<"$bw_t")"
unset UCX_TLS UCX_NET_DEVICES

for ep in msg rdm; do
  sv=verbs tcp=tcp
  [ "$ep" = rdm ] && sv="verbs;ofi_rxm" tcp="tcp;ofi_rxm"
  l_s=$(fabric "$sv" "$ep" 8 "$iters"); l_t=$(fabric "$tcp" "$ep" 8 "$iters")
  row "libfabric $ep (mean)" "lat us" "$(awk '{print $7}' <<<"$l_s")" "$(awk '{print $7}' <<<"$l_t")"
  b_s=$(fabric "$sv" "$ep" 1048576 "$bw_iters"); b_t=$(fabric "$tcp" "$ep" 1048576 "$bw_iters")
  row "libfabric $ep 1 MiB" "bw MB/s" "$(awk '{print $6}' <<<"$b_s")" "$(awk '{print $6}' <<<"$b_t")"
done

if [ "${SKIP_MPI:-0}" != 1 ]; then
  # "<stack> latency|bandwidth pingpong N x B bytes: half-rtt X us, Y MB/s; ..."
  SOFTVERBS_LIBIBVERBS_DIR="$lib" BW_ITERS=50 scripts/mpi-bench.sh >"$work/mpi.out" 2>&1 || true
  mpi() { awk -v s="$1" -v k="$2" -v f="$3" '$1 == s && $2 == k { for (i = 1; i <= NF; i++) { w = $i; sub(/[,;]$/, "", w); if (w == f) { v = $(i - 1); gsub(/,/, "", v); print v } } }' "$work/mpi.out"; }
  for tcp in ucx-tcp ob1-tcp; do
    row "Open MPI vs $tcp (mean)" "lat us" "$(mpi softverbs latency us)" "$(mpi "$tcp" latency us)"
    row "Open MPI vs $tcp 1 MiB" "bw MB/s" "$(mpi softverbs bandwidth MB/s)" "$(mpi "$tcp" bandwidth MB/s)"
  done
fi
