#!/usr/bin/env bash
# Installs the Debian packages a target needs, only those missing, and fetches the Go modules.
# Usage: scripts/deps.sh [test|demo|bench]
set -euo pipefail
need=(nftables iptables conntrack iproute2 dnsutils ethtool)
case "${1:-test}" in
  demo)  need+=(dnsmasq-base) ;;
  bench) need+=(dnsmasq-base unbound dnsperf) ;;
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
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
go mod download
