#!/usr/bin/env bash
# Installs the Debian packages named that are not installed yet
# (noninteractive apt-get; sudo when not root). Used by scripts/test.sh and
# scripts/perftest.sh, so that each works on a fresh machine.
#   scripts/install-packages.sh PKG...
set -euo pipefail
need_pkgs=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "== installing ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
