#!/usr/bin/env bash
# Benchmark of an Open MPI job on softverbs beside the same job over TCP, in the
# same run: 4 ranks as 2 "hosts" (network namespaces joined by a veth pair,
# 2 ranks per host, ranks 0 and 1 on different hosts) running
# crates/cli/tests/mpi/pingpong.c: ranks 0 and 1 ping-pong (8 bytes for the
# latency, 1 MiB for the bandwidth: 2 x messages x size / time), then an
# allreduce checked for its result. Stacks:
#   softverbs  pml ucx, UCX_TLS=rc_verbs,ud_verbs (every byte through softverbs)
#   ucx-tcp    pml ucx, UCX_TLS=tcp over the veth
#   ob1-tcp    pml ob1, btl tcp,self over the veth
# mpirun runs in the first namespace and starts each host's orted through a
# plm_rsh_agent (ip netns exec + a UTS namespace + softverbs exec), no ssh.
# Needs root (network namespaces), openmpi-bin, libopenmpi-dev, iproute2,
# util-linux. ITERS (default 2000) latency round trips; BW_ITERS (default 50).
set -euo pipefail
cd "$(dirname "$0")/.."
lib="${SOFTVERBS_LIBIBVERBS_DIR:-$(scripts/build-ibverbs.sh)}"
cargo build -q --release -p softverbs-cli >&2
bin="$PWD/target/release/softverbs"
iters="${ITERS:-2000}"
bw_iters="${BW_ITERS:-50}"
tag="svmb$$" addr_a=10.79.0.1 addr_b=10.79.0.2
. scripts/two-hosts.sh

mpicc -O2 -o "$work/pingpong" crates/cli/tests/mpi/pingpong.c
cat >"$work/agent" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  hostA) ns=$nsa addr=$addr_a ;;
  hostB) ns=$nsb addr=$addr_b ;;
  *) echo "no such host: \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c \\
  'hostname "\$0" && export SOFTVERBS_ADDR="\$1" && exec "\$2" exec --lib-dir "\$3" -- sh -c "\$4"' \\
  "\$host" "\$addr" "$bin" "$lib" "\$*"
AGENT
chmod +x "$work/agent"

job() { # stack iters bytes: the program's result line
  local stack=$1; shift
  local args=()
  case $stack in
    softverbs) args=(--mca pml ucx --mca btl '^vader,tcp,openib,uct' --mca osc '^ucx')
               export UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=softverbs0:1 ;;
    # pml ucx declines a UCX that has only TCP unless told any transport will do.
    ucx-tcp)   args=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
                     --mca btl '^vader,tcp,openib,uct' --mca osc '^ucx')
               export UCX_TLS=tcp UCX_NET_DEVICES=all ;;
    ob1-tcp)   args=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$addr_a/24")
               export UCX_TLS=tcp UCX_NET_DEVICES=all ;;
  esac
  timeout 300 ip netns exec "$nsa" mpirun --allow-run-as-root --oversubscribe -np 4 \
    --host hostA:2,hostB:2 --map-by node \
    --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$addr_a/24" --mca mpi_yield_when_idle 1 \
    "${args[@]}" -x UCX_TLS -x UCX_NET_DEVICES "$work/pingpong" "$@" 2>&1 |
    grep '^pingpong' || echo "failed"
}

echo "Open MPI ping-pong between two hosts (network namespaces), 4 ranks; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
for stack in softverbs ucx-tcp ob1-tcp; do
  printf '%-10s latency    %s\n' "$stack" "$(job "$stack" "$iters" 8)"
  printf '%-10s bandwidth  %s\n' "$stack" "$(job "$stack" "$bw_iters" 1048576)"
done
