#!/usr/bin/env bash
# The demo, run by `make demo` inside `unshare --net`: a throwaway network namespace that disappears with this
# script. In it: dnsmasq as the cluster's DNS (the kube-dns-upstream Service) and as the node's upstream, the agent
# with the standard manifest's Corefile and node-cache's flags, a few lookups, the nftables table, then SIGTERM;
# then a second agent killed with SIGKILL, and both addresses still answered: failing open.
set -euo pipefail
bin=$(realpath "$1")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

# Bold headings on a terminal only: a log file gets plain text.
if [[ -t 1 ]]; then say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }; else say() { printf '\n== %s\n' "$*"; }; fi

ip link set lo up
ip addr add 127.0.0.53/8 dev lo 2>/dev/null || true

say "upstream: dnsmasq on 127.0.0.53 (cluster DNS for cluster.local, upstream for everything else)"
dnsmasq --keep-in-foreground --no-resolv --no-hosts --listen-address=127.0.0.53 --bind-interfaces --port=53 \
  --pid-file="$work/dnsmasq.pid" --log-facility=- --quiet-dhcp \
  --address=/kubernetes.default.svc.cluster.local/10.96.0.1 \
  --address=/demo.example/192.0.2.80 --address=/corp.internal/198.51.100.7 2>"$work/dnsmasq.log" &
sleep 0.3

say "kube-proxy stand-in: the kube-dns ClusterIP 10.96.0.10:53 DNATed to dnsmasq, as kube-proxy does"
# What the cluster does for the ClusterIP with nothing of ours in the way. While the agent serves, its notrack
# rules take 10.96.0.10's queries before this NAT ever sees them.
nft -f - <<'NFT'
table ip demo-kube-proxy {
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr 10.96.0.10 udp dport 53 dnat to 127.0.0.53
		ip daddr 10.96.0.10 tcp dport 53 dnat to 127.0.0.53
	}
}
NFT

mkdir -p "$work/coredns" "$work/kube-dns"
# The standard Corefile as deploy/ ships it (the node-local-dns ConfigMap; a deploy test proves the two equal),
# after the documented sed: link-local 169.254.20.10, kube-dns 10.96.0.10, domain cluster.local.
sed -e 's/__PILLAR__LOCAL__DNS__/169.254.20.10/g' -e 's/__PILLAR__DNS__SERVER__/10.96.0.10/g' \
  -e 's/__PILLAR__DNS__DOMAIN__/cluster.local/g' "$(dirname "$0")/../deploy/testdata/standard.Corefile" \
  >"$work/coredns/Corefile.base"
# The kube-dns ConfigMap: upstreams for "." and one stub domain.
echo '["127.0.0.53"]' >"$work/kube-dns/upstreamNameservers"
echo '{"corp.internal": ["127.0.0.53:53"]}' >"$work/kube-dns/stubDomains"

say "agent: $bin -localip 169.254.20.10,10.96.0.10 -conf $work/Corefile -upstreamsvc kube-dns-upstream"
# The kube-dns ClusterIP (here also a listen address) is where the link-local fallback sends queries to
# 169.254.20.10 while no agent takes them; Kubernetes sets KUBE_DNS_SERVICE_HOST in every kube-system pod.
KUBE_DNS_UPSTREAM_SERVICE_HOST=127.0.0.53 KUBE_DNS_SERVICE_HOST=10.96.0.10 "$bin" -localip 169.254.20.10,10.96.0.10 \
  -basecorefile "$work/coredns/Corefile.base" -kubednscm "$work/kube-dns" -conf "$work/Corefile" \
  -upstreamsvc kube-dns-upstream -metrics-listen-address 127.0.0.1:9353 2>"$work/agent.log" &
agent=$!
for _ in $(seq 100); do grep -q '"msg":"ready"' "$work/agent.log" && break; sleep 0.05; done
grep -q '"msg":"ready"' "$work/agent.log" || { cat "$work/agent.log"; exit 1; }
grep -E '"msg":"(start-up step done|ready)"' "$work/agent.log" | sed 's/^/  /'

for q in "kubernetes.default.svc.cluster.local @169.254.20.10" "demo.example @10.96.0.10" "corp.internal @169.254.20.10" "demo.example @169.254.20.10 +tcp"; do
  say "dig $q"
  # shellcheck disable=SC2086
  dig +noall +answer +stats $q | grep -vE '^;; (WHEN|MSG SIZE)' | sed 's/^/  /'
done

say "CoreDNS cache: the second lookup of demo.example (over TCP) was a hit"
kill -USR1 "$(cat "$work/dnsmasq.pid")" 2>/dev/null || true
# Only the cluster.local and . blocks: the standard Corefile's in-addr.arpa and ip6.arpa blocks have caches of
# their own, which this demo never asks.
curl -s 127.0.0.1:9253/metrics | grep -E '^coredns_cache_(hits|misses)_total' | grep -vE 'arpa' | sed 's/^/  /'

say "nft list table inet nodelocaldns (programmed over netlink in one transaction)"
# awk reads the whole listing: `head` would close the pipe early and fail the script under pipefail.
nft list table inet nodelocaldns | awk 'NR <= 24 { print "  " $0 }'
echo "  ..."
say "nft list tables (the link-local fallback outlives the agent, for its lease)"
nft list tables | sed 's/^/  /'
nft list set inet nodelocaldns-fallback covered4 | awk '/elements/ { sub(/^[ \t]+/, ""); print "  covered4: " $0 }'
say "interface"
ip -br addr show nodelocaldns | sed 's/^/  /'
say "health and readiness on 169.254.20.10:8080"
printf '  /health: %s   /ready: %s\n' "$(curl -s 169.254.20.10:8080/health)" "$(curl -s 169.254.20.10:8080/ready)"

say "SIGTERM: the table goes first, then the interface, then CoreDNS"
kill -TERM "$agent"; wait "$agent" || true
grep -E '"msg":"(shutting down|deleted nftables table|link removed|stopped)"' "$work/agent.log" | sed 's/^/  /' || true
if nft list table inet nodelocaldns >/dev/null 2>&1; then echo "  table still present!"; exit 1; fi
ip link show nodelocaldns >/dev/null 2>&1 && { echo "  interface still present!"; exit 1; }
nft list table inet nodelocaldns-fallback >/dev/null 2>&1 || { echo "  the link-local fallback went with the agent!"; exit 1; }
echo "  left behind: only the link-local fallback, pointing at kube-dns for its 15-minute lease"

say "failing open: the agent again, then SIGKILL (an OOM kill, a node-pressure eviction): nothing runs its exit"
KUBE_DNS_UPSTREAM_SERVICE_HOST=127.0.0.53 KUBE_DNS_SERVICE_HOST=10.96.0.10 "$bin" -localip 169.254.20.10,10.96.0.10 \
  -basecorefile "$work/coredns/Corefile.base" -kubednscm "$work/kube-dns" -conf "$work/Corefile" \
  -upstreamsvc kube-dns-upstream -metrics-listen-address 127.0.0.1:9353 2>"$work/agent2.log" &
agent=$!
for _ in $(seq 100); do grep -q '"msg":"ready"' "$work/agent2.log" && break; sleep 0.05; done
grep -q '"msg":"ready"' "$work/agent2.log" || { cat "$work/agent2.log"; exit 1; }
echo "  serving again (pid $agent); kill -KILL $agent"
kill -KILL "$agent"; wait "$agent" 2>/dev/null || true
# The kernel deletes the table with the agent's netlink socket (an owned table): nothing waits for a timeout.
if nft list table inet nodelocaldns >/dev/null 2>&1; then echo "  table still present!"; exit 1; fi
echo "  table inet nodelocaldns: gone with the process (the kernel removes an owned table with its socket)"
for q in "demo.example @169.254.20.10" "demo.example @10.96.0.10" "demo.example @169.254.20.10 +tcp"; do
  say "dig $q (no agent)"
  # shellcheck disable=SC2086
  out=$(dig +noall +answer +tries=1 +time=2 $q)
  [[ -n $out ]] || { echo "  unanswered!"; exit 1; }
  echo "$out" | sed 's/^/  /'
done
echo "  169.254.20.10: the link-local fallback rewrote it to the ClusterIP; 10.96.0.10: no notrack left, so the"
echo "  kube-proxy stand-in took it to kube-dns (dnsmasq): both answered with no agent running"
nft list chain inet nodelocaldns-fallback host-output | awk '/counter/ { sub(/^[ \t]+/, ""); print "  fallback: " $0 }'
echo "  the namespace, with all of it, disappears with this script"
