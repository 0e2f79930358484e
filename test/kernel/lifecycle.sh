#!/bin/sh
# Lifecycle smoke test of the real binary inside the kernel VM (run by kernel/init.sh), the only place where the
# production `dummy` link kind exists: start, serve, surge handover to a second instance, SIGKILL and restart,
# teardown; then the IPVS overlay's flags in front of kube-proxy's IPVS mode, where a SIGKILL leaves the
# link-local address to the fallback (the VM is also the only place with ip_vs). Its assertions are on what a user observes (DNS answers; an interface and a table whose names start
# with "nodelocaldns"), not on how the handover is done, so they hold across changes to that mechanism.
# busybox sh; dig, ip and nft are the real tools. Prints "lifecycle: ok" or "lifecycle: FAIL ..." lines.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin # iproute2's ip before busybox's
. "$(dirname "$0")/vmlib.sh"
bin=/usr/bin/nodelocaldns
ip4=169.254.20.10
work=/tmp/lifecycle
mkdir -p "$work/coredns" "$work/kube-dns"
# A Corefile that answers by itself (no upstream in the VM): hosts gives a real A record.
cat >"$work/coredns/Corefile.base" <<EOF
.:53 {
    errors
    bind __PILLAR__LOCAL__DNS__
    hosts {
        192.0.2.53 smoke.test
    }
}
EOF
failed=0
fail() { echo "lifecycle: FAIL $*"; failed=1; }
step() { echo "lifecycle: --- $*"; }

# start N: starts instance N (its own metrics port), leaving its pid in $pidN and log in $work/agentN.log.
start() {
	"$bin" -localip "$ip4" -basecorefile "$work/coredns/Corefile.base" -kubednscm "$work/kube-dns" \
		-conf "$work/Corefile$1" -metrics-listen-address "127.0.0.1:935$1" -log-level info \
		>"$work/agent$1.log" 2>&1 &
	eval "pid$1=$!"
}
# answer prints the A record of smoke.test, or nothing (dig prints its timeout message on stdout).
# A query counts as failed after 5 s: lost, not late (TCG on a busy machine can take seconds to answer).
answer() { dig +short +tries=1 +timeout=5 @"$ip4" smoke.test A 2>/dev/null | grep -x '[0-9.]*'; }
# wait_answer SECONDS: until smoke.test is answered.
wait_answer() { poll "$1" answered; }
answered() { [ "$(answer)" = 192.0.2.53 ]; }
has_link() { ip -o link show | awk -F': ' '{print $2}' | grep -q '^nodelocaldns'; }
has_table() { nft list tables | grep -q ' nodelocaldns'; }
# The VM's ip may be busybox's, which has no -details: the kind is read from the agent's own start-up line (the
# kernel tests assert it through netlink).
is_dummy() { grep -q '"msg":"interface ready".*"kind":"dummy"' "$work/agent$1.log"; }
dump() { for f in "$work"/agent*.log; do echo "lifecycle: log $f:"; tail -20 "$f"; done; }

# A boot without conntrack's expressions (KERNEL_HOLD_BACK=nft_ct): the preflight names them, and the agent, whose
# rules need notrack, fails its start-up with an error instead of serving half a table.
if "$bin" -print-rules -localip "$ip4" 2>"$work/preflight" >/dev/null && grep -q 'MISSING conntrack' "$work/preflight"; then
	step "start without conntrack's expressions"
	grep 'preflight' "$work/preflight" | sed 's/^/lifecycle: /'
	grep -q '^nodelocaldns: preflight: kernel .* lacks conntrack; has owner-flag, socket, ipv6-rewrite$' "$work/preflight" ||
		fail "preflight: -print-rules does not sum up conntrack missing, the rest present"
	start 1
	wait_exit "$pid1" 120 || fail "no conntrack: the agent still runs 120 s after its start"
	wait "$pid1"
	rc=$?
	echo "lifecycle: no conntrack: the agent exited $rc: $(grep -o '"msg":"start-up failed".*' "$work/agent1.log")"
	[ "$rc" -ne 0 ] && grep -q '"msg":"start-up failed"' "$work/agent1.log" || fail "no conntrack: start-up did not fail"
	grep -q '"logger":"preflight","msg":"the node lacks a kernel capability","capability":"conntrack"' "$work/agent1.log" ||
		fail "no conntrack: the agent did not warn that the node lacks conntrack"
	has_table && fail "no conntrack: a table left behind: $(nft list tables)"
	has_link && fail "no conntrack: the interface left behind"
	[ "$failed" -eq 0 ] && echo "lifecycle: ok" && exit 0
	dump
	exit 1
fi

step "start"
start 1
wait_answer 120 || fail "start: smoke.test not answered within 120 s"
has_link || fail "start: no interface nodelocaldns*"
is_dummy 1 || fail "start: the agent did not make a dummy interface: $(grep '"interface ready"' "$work/agent1.log")"
has_table || fail "start: no table nodelocaldns*"
# Without nft_socket (a boot with it held back) the agent gates on the addresses it has bound; with it, on the
# socket expression. Either way every step below must hold.
# The preflight, three ways: -print-rules' lines on stderr, the agent's start-up log, its metric.
"$bin" -print-rules -localip "$ip4" 2>"$work/preflight" >/dev/null || fail "preflight: -print-rules failed"
grep 'preflight' "$work/preflight" | sed 's/^/lifecycle: /'
capability() { wget -qO- "http://127.0.0.1:935$1/metrics" | grep "^nodelocaldns_node_capability{name=\"$2\"}" | awk '{print $2}'; }
if [ -d /sys/module/nft_socket ]; then
	grep -q 'refused the socket expression' "$work/agent1.log" && fail "start: ungated although the kernel has nft_socket"
	echo "lifecycle: the kernel has nft_socket: the agent gates on a live listener"
	grep -q '^nodelocaldns: preflight: kernel .*: nothing missing (owner-flag, socket, conntrack, ipv6-rewrite)$' "$work/preflight" ||
		fail "preflight: -print-rules does not say nothing is missing"
	grep -q '"logger":"preflight","msg":"the node has every kernel capability the agent uses"' "$work/agent1.log" ||
		fail "preflight: the agent did not log that nothing is missing"
	[ "$(capability 1 socket)" = 1 ] || fail "preflight: nodelocaldns_node_capability{name=\"socket\"} is $(capability 1 socket), want 1"
else
	grep -q 'refused the socket expression' "$work/agent1.log" || fail "start: no warning that the kernel lacks nft_socket"
	echo "lifecycle: the kernel has no nft_socket: the agent gates on the addresses it has bound"
	grep -q '^nodelocaldns: preflight: MISSING socket: the socket expression (nft_socket' "$work/preflight" ||
		fail "preflight: -print-rules does not list the socket expression as missing"
	grep -q '^nodelocaldns: preflight: kernel .* lacks socket; has owner-flag, conntrack, ipv6-rewrite$' "$work/preflight" ||
		fail "preflight: -print-rules does not sum up socket missing, the rest present"
	[ "$(grep -c '"logger":"preflight","msg":"the node lacks a kernel capability"' "$work/agent1.log")" = 1 ] &&
		grep -q '"logger":"preflight","msg":"the node lacks a kernel capability","capability":"socket"' "$work/agent1.log" ||
		fail "preflight: the agent did not log one warning, for the socket expression"
	[ "$(capability 1 socket)" = 0 ] || fail "preflight: nodelocaldns_node_capability{name=\"socket\"} is $(capability 1 socket), want 0"
fi
for c in owner-flag conntrack ipv6-rewrite; do
	[ "$(capability 1 $c)" = 1 ] || fail "preflight: nodelocaldns_node_capability{name=\"$c\"} is $(capability 1 $c), want 1"
done
echo "lifecycle: preflight: metric $(wget -qO- http://127.0.0.1:9351/metrics | grep '^nodelocaldns_node_capability' | tr '\n' ' ')"

step "surge handover: a second instance starts, the first stops, queries keep being answered"
start 2
# The first leaves once the second is ready, as a rollout's maxSurge waits for the new pod's readiness: a fixed
# sleep let a starved VM stop the first before the second served.
poll 120 grep -qs '"msg":"ready"' "$work/agent2.log" || fail "surge: the second instance not ready within 120 s"
# Queries during the handover, one after the other; each must be answered.
: >"$work/handover"
(
	while [ ! -f "$work/handover.stop" ]; do
		if [ "$(answer)" = 192.0.2.53 ]; then echo ok; else echo fail; fi >>"$work/handover"
	done
) &
loader=$!
sleep 1
kill -TERM "$pid1"
wait_exit "$pid1" 60 || fail "surge: first instance still running 60 s after SIGTERM"
sleep 5 # queries after the first instance is gone (dig is slow under TCG: about one a second)
touch "$work/handover.stop"
wait "$loader"
ok=$(grep -c ok "$work/handover")
bad=$(grep -c fail "$work/handover")
echo "lifecycle: surge handover: $ok queries answered, $bad failed"
[ "$bad" -eq 0 ] || fail "surge: $bad queries failed while the first instance stopped"
[ "$ok" -gt 0 ] || fail "surge: no query answered"
wait_answer 30 || fail "surge: second instance does not answer"
has_link || fail "surge: no interface after the handover"
has_table || fail "surge: no table after the handover"

step "SIGKILL and restart"
kill -KILL "$pid2"
wait_exit "$pid2" 10 || fail "SIGKILL: instance still running"
start 1
wait_answer 120 || fail "restart: smoke.test not answered within 120 s"
has_link || fail "restart: no interface"
has_table || fail "restart: no table"

step "teardown"
kill -TERM "$pid1"
wait_exit "$pid1" 60 || fail "teardown: still running 60 s after SIGTERM"
has_link && fail "teardown: interface left behind: $(ip -o link show | grep nodelocaldns)"
has_table && fail "teardown: table left behind: $(nft list tables | grep nodelocaldns)"
[ -z "$(answer)" ] || fail "teardown: still answered"

step "ipvs: the IPVS overlay's flags, kube-dns behind an IPVS service; after SIGKILL the link-local fallback answers"
# kube-proxy's IPVS mode, as deploy/overlays/ipvs expects it: the agent listens on the link-local address only,
# kube-ipvs0 (a dummy) holds the ClusterIPs, and an IPVS virtual service with NAT forwarding (conntrack on)
# takes the kube-dns ClusterIP (the fallback's target, and here the agent's upstream too) to kube-dns. kube-dns
# is our own binary in a namespace of its own, serving a fixed answer; a pod namespace sends the queries a pod
# would. IPVS un-NATs replies to the ClusterIP: the fallback's reply rules give them the link-local source back.
upstream=10.96.0.10
# busybox sh runs its own applets before PATH (its ip has no netns): iproute2's ip by its path.
iproute=/usr/sbin/ip
$iproute netns add kdns
$iproute netns add pod
$iproute link add kdns0 type veth peer name eth0 netns kdns
$iproute link add pod0 type veth peer name eth0 netns pod
$iproute addr add 198.51.100.1/24 dev kdns0
$iproute link set kdns0 up
$iproute addr add 192.0.2.1/24 dev pod0
$iproute link set pod0 up
for ns in kdns pod; do
	$iproute -n "$ns" link set lo up
	$iproute -n "$ns" link set eth0 up
done
$iproute -n kdns addr add 198.51.100.2/24 dev eth0
$iproute -n kdns route add default via 198.51.100.1
$iproute -n pod addr add 192.0.2.2/24 dev eth0
$iproute -n pod route add default via 192.0.2.1
echo 1 >/proc/sys/net/ipv4/ip_forward
echo 1 >/proc/sys/net/ipv4/vs/conntrack
$iproute link add kube-ipvs0 type dummy
$iproute addr add "$upstream/32" dev kube-ipvs0
for proto in -u -t; do
	ipvsadm -A "$proto" "$upstream:53" -s rr
	ipvsadm -a "$proto" "$upstream:53" -r 198.51.100.2:53 -m
done
mkdir -p "$work/kdns"
printf '.:53 {\n    bind 198.51.100.2\n    hosts {\n        192.0.2.99 smoke.test\n    }\n}\n' >"$work/kdns/Corefile.base"
$iproute netns exec kdns "$bin" -localip 198.51.100.2 -setupinterface=false -setupiptables=false \
	-basecorefile "$work/kdns/Corefile.base" -kubednscm "$work/kube-dns" -conf "$work/kdns/Corefile" \
	-metrics-listen-address 127.0.0.1:9399 >"$work/kdns.log" 2>&1 &
kdns=$!
# first_a SERVER [DIG OPTIONS]: the A record of smoke.test, asked of SERVER from here.
first_a() { s=$1; shift; dig +short +tries=1 +timeout=2 @"$s" smoke.test A "$@" 2>/dev/null | grep -x '[0-9.]*'; }
pod_answer() { $iproute netns exec pod dig +short +tries=1 +timeout=2 @"$ip4" smoke.test A "$@" 2>/dev/null | grep -x '[0-9.]*'; }
# until SECONDS WANT COMMAND...: until COMMAND prints WANT.
until_answer() {
	i=0 secs=$1 want=$2
	shift 2
	while [ "$i" -lt "$secs" ]; do
		[ "$("$@")" = "$want" ] && return 0
		sleep 1
		i=$((i + 1))
	done
	return 1
}
until_answer 120 192.0.2.99 first_a "$upstream" ||
	fail "ipvs: kube-dns not answered through IPVS within 120 s: $(tail -5 "$work/kdns.log")"
KUBE_DNS_UPSTREAM_SERVICE_HOST=$upstream KUBE_DNS_SERVICE_HOST=$upstream "$bin" -localip "$ip4" -upstreamsvc kube-dns-upstream \
	-basecorefile "$work/coredns/Corefile.base" -kubednscm "$work/kube-dns" -conf "$work/Corefile3" \
	-metrics-listen-address 127.0.0.1:9353 -log-level info >"$work/agent3.log" 2>&1 &
pid3=$!
until_answer 120 192.0.2.53 pod_answer || fail "ipvs: the pod's query not answered by the agent within 120 s"
nft list tables | grep -q 'inet nodelocaldns-fallback' || fail "ipvs: no fallback table: $(grep -i fallback "$work/agent3.log")"
kill -KILL "$pid3"
wait_exit "$pid3" 10 || fail "ipvs: instance still running after SIGKILL"
for proto in +notcp +tcp; do
	[ "$(pod_answer "$proto")" = 192.0.2.99 ] || fail "ipvs: after SIGKILL the pod's query ($proto) was not answered by kube-dns"
	[ "$(first_a "$ip4" "$proto")" = 192.0.2.99 ] || fail "ipvs: after SIGKILL the node's query ($proto) was not answered by kube-dns"
done
echo "lifecycle: ipvs: after SIGKILL, queries to $ip4 from the pod and from the node (UDP and TCP) were answered by kube-dns through IPVS"
"$bin" -teardown -localip "$ip4" >"$work/teardown.log" 2>&1 || fail "ipvs: -teardown failed: $(cat "$work/teardown.log")"
nft list tables | grep -q nodelocaldns && fail "ipvs: -teardown left $(nft list tables | grep nodelocaldns)"
kill -TERM "$kdns"

[ "$failed" -eq 0 ] && echo "lifecycle: ok" && exit 0
dump
exit 1
