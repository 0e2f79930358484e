#!/bin/sh
# The lifecycle matrix of the real binary inside the kernel VM (run by kernel/init.sh after lifecycle.sh), on
# both boots: with nft_socket and with it held back (KERNEL_HOLD_BACK), so that the rows can be compared. A pod
# namespace asks the kube-dns ClusterIP and the link-local address in turn, over UDP and TCP, one query at a time, while each
# row's event happens; every answer is counted as the cache's (192.0.2.53), kube-dns's (192.0.2.99: our binary in
# a namespace of its own, behind a kube-proxy-like DNAT of the ClusterIP) or lost. Prints one "matrix:" line per
# row, and "matrix: FAIL ..." where a row the agent itself knows about loses a UDP query (TCP: more than the one a
# switch may reset) or goes to the wrong server.
# Measured (2026-12, answers by the cache/kube-dns/lost per address and protocol, about a query a second under
# TCG): every row the agent knows about is the same on both boots but for the numbers (first start 1/1/0 for
# the ClusterIP, 2/0/0 link-local; surge 9-10/0/0; SIGTERM and SIGKILL then 5 s, 0/6-7/0; a bind leaving the
# ClusterIP out 0/5-6/0 for it); SIGSTOP 4 s, 2/0/3 on both (lost while stopped); a listener failing inside the
# running agent (internal/nft/nftconn TestGateFailsOpen, TestUngatedFollowsTheBoundAddresses): kube-dns answers with
# nft_socket, lost without it until the process exits. One TCP loss at a switch in four runs of each boot.
# busybox sh; dig, ip and nft are the real tools.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/vmlib.sh"
bin=${NODELOCALDNS_BIN:-/usr/bin/nodelocaldns} # the VM's; another to try the script in a throwaway namespace
iproute=/usr/sbin/ip # busybox sh runs its own applets before PATH (its ip has no netns)
ll=169.254.20.10
ci=10.96.0.20
kdnsip=198.18.0.2
m=/tmp/matrix
mkdir -p "$m/coredns" "$m/kube-dns" "$m/kdns"
failed=0
fail() { echo "matrix: FAIL $*"; failed=1; }

corefile() { # corefile BIND: the agent's base Corefile, answering by itself (no upstream in the VM)
	printf '.:53 {\n    errors\n    bind %s\n    hosts {\n        192.0.2.53 smoke.test\n    }\n}\n' "$1" >"$m/coredns/Corefile.base.tmp"
	mv "$m/coredns/Corefile.base.tmp" "$m/coredns/Corefile.base"
}
corefile __PILLAR__LOCAL__DNS__

if "$bin" -print-rules -localip "$ll" 2>&1 >/dev/null | grep -q 'MISSING conntrack'; then
	echo "matrix: skipped: the kernel lacks conntrack's expressions, the agent cannot start (lifecycle.sh checks that)"
	exit 0
fi

# --- the node: a pod, kube-dns, kube-proxy's DNAT of the ClusterIP -------------------------------------------
$iproute netns add mkdns
$iproute netns add mpod
$iproute link add mkdns0 type veth peer name eth0 netns mkdns
$iproute link add mpod0 type veth peer name eth0 netns mpod
$iproute addr add 198.18.0.1/24 dev mkdns0
$iproute addr add 203.0.113.1/24 dev mpod0
$iproute link set mkdns0 up
$iproute link set mpod0 up
for ns in mkdns mpod; do
	$iproute -n "$ns" link set lo up
	$iproute -n "$ns" link set eth0 up
done
$iproute -n mkdns addr add "$kdnsip/24" dev eth0
$iproute -n mkdns route add default via 198.18.0.1
$iproute -n mpod addr add 203.0.113.2/24 dev eth0
$iproute -n mpod route add default via 203.0.113.1
echo 1 >/proc/sys/net/ipv4/ip_forward
nft -f - <<EOF
table ip matrix-kube-proxy {
	chain prerouting { type nat hook prerouting priority dstnat; ip daddr $ci meta l4proto { tcp, udp } th dport 53 dnat to $kdnsip:53; }
	chain output { type nat hook output priority -100; ip daddr $ci meta l4proto { tcp, udp } th dport 53 dnat to $kdnsip:53; }
}
EOF
printf '.:53 {\n    bind %s\n    hosts {\n        192.0.2.99 smoke.test\n    }\n}\n' "$kdnsip" >"$m/kdns/Corefile.base"
$iproute netns exec mkdns "$bin" -localip "$kdnsip" -setupinterface=false -setupiptables=false \
	-basecorefile "$m/kdns/Corefile.base" -kubednscm "$m/kube-dns" -conf "$m/kdns/Corefile" \
	-metrics-listen-address 127.0.0.1:9398 >"$m/kdns.log" 2>&1 &
kdns=$!

# start N: instance N of the agent, for both addresses, with the link-local fallback towards the ClusterIP.
start() {
	KUBE_DNS_SERVICE_HOST=$ci "$bin" -localip "$ll,$ci" -basecorefile "$m/coredns/Corefile.base" -kubednscm "$m/kube-dns" \
		-conf "$m/Corefile$1" -metrics-listen-address "127.0.0.1:936$1" -log-level info >"$m/agent$1.log" 2>&1 &
	eval "pid$1=$!"
}
# who ADDR PROTO: who answered the pod's query to ADDR over PROTO (udp, tcp): cache, kube-dns or lost (no answer
# within 5 s: lost, not late; TCG on a busy machine can take seconds to answer).
who() {
	opt=+notcp
	[ "$2" = tcp ] && opt=+tcp
	case $($iproute netns exec mpod dig +short +tries=1 +timeout=5 $opt @"$1" smoke.test A 2>/dev/null | grep -x '[0-9.]*') in
	192.0.2.53) echo cache ;;
	192.0.2.99) echo kube-dns ;;
	*) echo lost ;;
	esac
}
# load ROW: queries from the pod to both addresses in turn, over UDP and over TCP, one line "ADDR PROTO WHO" each
# in $m/ROW, until unload.
load() {
	row=$1
	rm -f "$m/stop"
	: >"$m/$row"
	loaders=
	for p in udp tcp; do # one loader per protocol, side by side: twice the queries in the emulated VM's time
		(while [ ! -f "$m/stop" ]; do
			for a in $ci $ll; do echo "$a $p $(who $a $p)" >>"$m/$row"; done
		done) &
		loaders="$loaders $!"
	done
}
unload() {
	touch "$m/stop"
	for l in $loaders; do wait "$l"; done
}
# until_both SECONDS WHO: until the last answer for each address and protocol is WHO's (the loaders keep asking).
until_both() { poll "$1" last_are 4 "" "$2"; }
# until_addr SECONDS ADDR WHO: until the last answers for ADDR (UDP and TCP) are WHO's.
until_addr() { poll "$1" last_are 2 "$2 " "$3"; }
# last_are N PREFIX WHO: the last N answers of lines starting with PREFIX are all WHO's.
last_are() { [ "$(grep "^$2" "$m/$row" | tail -n "$1" | grep -c " $3\$")" = "$1" ]; }
# lasts SECONDS: at least that many seconds and 3 queries to each address and protocol more.
lasts() {
	n=$(($(wc -l <"$m/$row") + 12))
	sleep "$1"
	while [ "$(wc -l <"$m/$row")" -lt "$n" ]; do sleep 0.2; done
}
count() { grep -c "^$1 [a-z]* $2\$" "$m/$row"; } # count ADDR WHO: over both protocols
# report TITLE: one line for the row just unloaded; per address and protocol: cache/kube-dns/lost.
report() {
	line="matrix: $row: $1:"
	for a in $ci $ll; do
		for p in udp tcp; do
			line="$line $a $p $(grep -c "^$a $p cache\$" "$m/$row")/$(grep -c "^$a $p kube-dns\$" "$m/$row")/$(grep -c "^$a $p lost\$" "$m/$row");"
		done
	done
	echo "$line"
}
# expect ADDR WHO...: every answer for ADDR in this row was one of WHO (lost included only when named).
expect() {
	a=$1
	shift
	bad=$(grep "^$a " "$m/$row" | awk '{print $3}' | sort -u | while read -r got; do
		case " $* " in *" $got "*) ;; *) echo "$got" ;; esac
	done | tr '\n' ' ')
	[ -z "$bad" ] || fail "$row: $a answered by $bad(want only $*)"
}
# lost_max ADDR PROTO N: at most N of ADDR's PROTO queries lost.
lost_max() {
	n=$(grep -c "^$1 $2 lost\$" "$m/$row")
	[ "$n" -le "$3" ] || fail "$row: $1 $2: $n lost, want at most $3"
}
# switch ADDR...: lost only what a switch between servers may lose: no UDP query, at most one TCP query (a
# connection open at the instant a table comes or goes has its later packets sent the other way, and is reset).
switch() { for a in "$@"; do lost_max "$a" udp 0 && lost_max "$a" tcp 1; done; }
# switched TITLE WHO...: ends a row in which the agent switched servers: its report, every answer to either
# address WHO's, and no more lost than a switch may lose.
switched() {
	t=$1
	shift
	unload
	report "$t"
	expect $ci "$@" lost
	expect $ll "$@" lost
	switch $ci $ll
}
# killed ADDR...: lost only what was in flight to a killed process: one query of each protocol at most.
killed() { for a in "$@"; do lost_max "$a" udp 1 && lost_max "$a" tcp 1; done; }

i=0
until [ "$(who $ci udp)" = kube-dns ] || [ "$i" -ge 120 ]; do
	sleep 1
	i=$((i + 1))
done
[ "$(who $ci udp)" = kube-dns ] || fail "setup: kube-dns not answered through the DNAT within 120 s: $(tail -5 "$m/kdns.log")"
# The preflight says which boot this is (nft_socket built in leaves no /sys/module entry).
if "$bin" -print-rules -localip "$ll" 2>&1 >/dev/null | grep -q 'MISSING socket'; then mode="without nft_socket"; else mode="with nft_socket"; fi
echo "matrix: rows $mode; each row: queries from a pod to $ci (ClusterIP) and $ll (link-local), UDP and TCP, one at a time;"
echo "matrix: per address and protocol: answered by the cache/by kube-dns/lost"

# --- the rows --------------------------------------------------------------------------------------------
load first-start
start 1
until_both 120 cache || fail "first-start: not served within 120 s"
unload
report "first start on the node, until it serves"
expect $ci kube-dns cache lost
switch $ci
expect $ll lost cache # no fallback exists before the first registration

load surge
start 2
# The second instance comes up beside the first (it serves the same addresses: no observable switch); the
# first leaves once it is ready, as a rollout's maxSurge waits for the new pod's readiness.
poll 120 grep -qs '"msg":"ready"' "$m/agent2.log" || fail "surge: the second instance not ready within 120 s"
kill -TERM "$pid1"
wait_exit "$pid1" 60 || fail "surge: the first instance still runs 60 s after SIGTERM"
lasts 5
switched "surge: a second instance starts, the first gets SIGTERM" cache

load sigterm-last
kill -TERM "$pid2"
wait_exit "$pid2" 60 || fail "sigterm-last: still running 60 s after SIGTERM"
lasts 5
switched "SIGTERM, the last instance: then 5 s without an agent" cache kube-dns

load restart
start 1
until_both 120 cache || fail "restart: not served within 120 s"
switched "start again, until it serves (the fallback in place)" kube-dns cache

load partial-bind
corefile "$ll" # a reload whose bind leaves the ClusterIP out: the agent knows
until_addr 60 $ci kube-dns || fail "partial-bind: the unbound ClusterIP not answered by kube-dns within 60 s of the reload"
lasts 4
unload
report "a reload whose bind leaves the ClusterIP out, 4 s"
expect $ll cache
# The ClusterIP goes to kube-dns once the reload is done; before, the cache answers.
expect $ci cache kube-dns lost
switch $ci
load rebind
corefile __PILLAR__LOCAL__DNS__
until_both 60 cache || fail "rebind: the ClusterIP not taken back within 60 s"
unload
report "the bind back: until both are served"
expect $ci cache kube-dns lost
switch $ci
expect $ll cache

load sigstop
kill -STOP "$pid1"
lasts 4
kill -CONT "$pid1"
until_both 60 cache || fail "sigstop: not served again within 60 s of SIGCONT"
unload
report "SIGSTOP for 4 s, then SIGCONT (no liveness probe here)"

load sigkill
kill -KILL "$pid1"
wait_exit "$pid1" 10 || fail "sigkill: still running"
lasts 5
unload
report "SIGKILL, then 5 s without an agent"
expect $ci cache kube-dns lost
expect $ll cache kube-dns lost
killed $ci $ll

load restart-after-kill
start 1
until_both 120 cache || fail "restart-after-kill: not served within 120 s"
switched "restart after SIGKILL, until it serves" kube-dns cache

kill -TERM "$pid1"
wait_exit "$pid1" 60 || fail "teardown: still running 60 s after SIGTERM"
kill -TERM "$kdns"
[ "$failed" -eq 0 ] && echo "matrix: ok" && exit 0
for f in "$m"/agent*.log; do echo "matrix: log $f:" && tail -20 "$f"; done
exit 1
