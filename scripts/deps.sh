#!/usr/bin/env bash
# Installs the Debian packages a target needs, only those missing, and fetches the Go modules.
# Usage: scripts/deps.sh [test|demo|bench|arm64|stress]
set -euo pipefail
source "$(dirname "$0")/apt.sh"
need=(nftables iptables conntrack iproute2 dnsutils ethtool)
# qemu-user: qemu-aarch64, which runs the arm64 unit tests (make test-arm64, part of make test-ci, which installs it
# through `deps.sh arm64` when it is missing). Installed without its recommended qemu-user-binfmt, like everything
# here (--no-install-recommends): nothing is registered with the host's binfmt_misc.
case "${1:-test}" in
  test)  ;;
  demo)  need+=(dnsmasq-base) ;;
  bench) need+=(dnsmasq-base unbound dnsperf) ;;
  arm64) need=(qemu-user) ;;
  stress) need=(stress-ng) ;;
esac
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "deps: missing Debian packages ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}"
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
go mod download
