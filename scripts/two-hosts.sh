# Sourced by the benchmark scripts: two "hosts" as network namespaces joined
# by a veth pair, and a cleanup trap that ends what is left in them (by PID)
# and deletes them. Set before sourcing: tag (unique, short), addr_a, addr_b.
# Defines nsa, nsb and work (a temporary directory, removed by the trap).
nsa="${tag}A" nsb="${tag}B"
work=$(mktemp -d)

cleanup() {
  for ns in "$nsa" "$nsb"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns delete "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$nsa"
ip netns add "$nsb"
ip link add "${tag}a" netns "$nsa" type veth peer name "${tag}b" netns "$nsb"
ip -n "$nsa" addr add "$addr_a/24" dev "${tag}a"
ip -n "$nsb" addr add "$addr_b/24" dev "${tag}b"
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
ip -n "$nsa" link set "${tag}a" up
ip -n "$nsb" link set "${tag}b" up
