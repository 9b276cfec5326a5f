#!/usr/bin/env bash
# The full test suite, on a fresh machine: installs the real-world tools the
# tests check against (Debian packages), then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v tshark >/dev/null || need_pkgs+=(tshark)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "== installing ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# Tests that compare against external tools fail (instead of skipping) here.
export SOFTVERBS_REQUIRE_TOOLS=1
mkdir -p target
echo "== cargo test --workspace"
cargo test --workspace --no-fail-fast 2>&1 | tee target/test-output.txt
echo "== summary"
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' target/test-output.txt
