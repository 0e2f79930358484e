#!/usr/bin/env bash
# A two-node Kubernetes cluster in throwaway network namespaces. node-1 runs etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler; both nodes run containerd (+ runc, CNI bridge), a kubelet and
# kube-proxy. Each node is a network namespace and a private mount namespace held by an "anchor" process. The
# nodes' eth0s are the two ends of one veth pair, and each routes the other's pod CIDR to the other's node IP;
# nothing links them to the machine's network, so no packet can leave. In each mount namespace /run, /var/lib
# and /var/log are bind-mounted from the node's state directory, so containerd, the kubelet and CNI keep their
# default paths and nothing lands on the machine. The machine-specific settings come from machine.sh.
#
#   node.sh up MODE     MODE is kube-proxy's: nftables or iptables. Needs CLUSTER_STATE (empty dir to use),
#                       CLUSTER_K8S_BIN, CLUSTER_DEB_ROOT (extracted Debian packages), CLUSTER_IMAGES (tarballs),
#                       CLUSTER_DNSQ (test/cluster/cmd/dnsq, the stub DNS servers). CLUSTER_KUBELET_DNS, if
#                       set, is the kubelets' clusterDNS (default: the kube-dns ClusterIP).
#   node.sh down        stops everything up started, by PID, and removes the namespaces and cgroups (also after
#                       a failed or half-done up; safe to run twice)
#   node.sh exec CMD…   runs CMD inside node-1's network and mount namespaces (CLUSTER_NODE=2: node-2's)
#
# State: node-1's is CLUSTER_STATE itself (with the cluster's pki/ and etcd/), node-2's is CLUSTER_STATE/node-2;
# each has logs/, ns/ (the bind-mounted /run, /var/lib, /var/log), containerd/ and cni/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=machine.sh
source "$here/machine.sh"
S=${CLUSTER_STATE:?set CLUSTER_STATE}
# The namespaces and cgroup roots are named after the state directory: two worktrees (or CI and a developer)
# may run the suite at once, and a fixed name made them share, and tear down, each other's nodes.
id=$(printf '%s' "$S" | sha1sum | cut -c1-8)
# up records where everything is, so that down (and exec) need only CLUSTER_STATE.
if [[ ${1:-} != up && -f $S/env ]]; then
	# shellcheck source=/dev/null
	source "$S/env"
fi

# node_select 1|2 points the per-node variables at one node: N (its state directory), L (its logs), NS (its
# network namespace, also its cgroup root's name), NAME, IP, CIDR (pod CIDR) and RESOLVER (its resolv.conf's
# nameserver, a stub DNS server on that node).
node_select() {
	case $1 in
	1) N=$S NS=nldns-$id NAME=$NODE_NAME IP=$NODE_IP CIDR=$POD_CIDR RESOLVER=$STUB_UPSTREAM_IP ;;
	2) N=$S/node-2 NS=nldns-$id-2 NAME=$NODE2_NAME IP=$NODE2_IP CIDR=$POD2_CIDR RESOLVER=$STUB2_UPSTREAM_IP ;;
	*) echo "node: no node $1" >&2; return 1 ;;
	esac
	CGROOT=$NS
	L=$N/logs
}
nodes="1 2"
node_select 1

log() { echo "node: $*" >&2; }
anchor() { cat "$L/anchor.pid"; }
in_node() { nsenter -t "$(anchor)" -m -n -- "$@"; }
node_path() { echo "$CLUSTER_DEB_ROOT/usr/bin:$CLUSTER_DEB_ROOT/usr/sbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"; }
# start NAME CMD…: a component in the node's namespaces, its output in logs/NAME.log, its PID in logs/NAME.pid.
start() {
	local name=$1
	shift
	nohup nsenter -t "$(anchor)" -m -n -- env PATH="$(node_path)" "$@" >"$L/$name.log" 2>&1 &
	echo $! >"$L/$name.pid"
}
wait_for() { # SECONDS WHAT CMD…
	local deadline=$(($(date +%s) + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || { log "timed out waiting for $what"; return 1; }
		sleep 0.2
	done
}

# netns_up makes both nodes' network namespaces and the veth pair between them.
netns_up() {
	local i
	for i in $nodes; do
		node_select $i
		# A namespace of this name is a previous run's from this same state directory that did not get torn down.
		if [[ -e /run/netns/$NS ]]; then
			log "removing a leftover namespace $NS"
			ip netns del $NS || true
		fi
		ip netns add $NS
		ip -n $NS link set lo up
		ip netns exec $NS sysctl -qw net.ipv4.ip_forward=1
		ip netns exec $NS sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
	done
	node_select 1
	local ns1=nldns-$id ns2=nldns-$id-2
	# One veth pair, one end in each node: the nodes' network. Nothing else is linked to it.
	ip -n $ns1 link add eth0 type veth peer name eth0 netns $ns2
	ip -n $ns1 addr add $NODE_IP/24 dev eth0
	ip -n $ns1 addr add $STUB_UPSTREAM_IP/32 dev eth0
	ip -n $ns1 addr add $STUB_DOMAIN_IP/32 dev eth0
	ip -n $ns2 addr add $NODE2_IP/24 dev eth0
	ip -n $ns2 addr add $STUB2_UPSTREAM_IP/32 dev eth0
	ip -n $ns1 link set eth0 up
	ip -n $ns2 link set eth0 up
	# Each node reaches the other's pods through the other node, as a cloud's routes or a flat CNI would.
	ip -n $ns1 route add $POD2_CIDR via $NODE2_IP dev eth0
	ip -n $ns2 route add $POD_CIDR via $NODE_IP dev eth0
	# Nothing answers at .1: the route gives the kubelet and kube-proxy a default interface to take the node IP from.
	ip -n $ns1 route add default via ${NODE_IP%.*}.1 dev eth0
	ip -n $ns2 route add default via ${NODE_IP%.*}.1 dev eth0
}

# anchor_up starts the selected node's anchor, which holds its private mount namespace; every component of the
# node enters it with nsenter.
anchor_up() {
	mkdir -p "$L" "$N/ns/run" "$N/ns/var-lib" "$N/ns/var-log" "$N/ns/sysctl"
	printf 'nameserver %s\n' "$RESOLVER" >"$N/resolv.conf"
	cat >"$N/anchor.sh" <<INIT
set -euo pipefail
mount --bind $N/ns/run /run
mount --bind $N/ns/var-lib /var/lib
mount --bind $N/ns/var-log /var/log
for s in $KUBELET_GLOBAL_SYSCTLS; do
	f=$N/ns/sysctl/\${s//\//_}
	cat /proc/sys/\$s >\$f
	mount --bind \$f /proc/sys/\$s
done
mountpoint -q /sys/fs/cgroup || mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup
for c in $CGROUP_V1_CONTROLLERS; do
	mkdir -p /sys/fs/cgroup/\$c
	mount -t cgroup -o \$c cgroup /sys/fs/cgroup/\$c
done
mkdir -p /sys/fs/cgroup/systemd /sys/fs/cgroup/unified
mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified
# The components resolve names with /etc/resolv.conf: keep it inside the namespace.
mount --bind $N/resolv.conf /etc/resolv.conf
echo \$\$ >$L/anchor.pid
exec sleep infinity
INIT
	nohup ip netns exec $NS unshare -m --propagation private bash "$N/anchor.sh" >"$L/anchor.log" 2>&1 &
	wait_for 60 anchor test -s "$L/anchor.pid"
	# Every pod of the node goes under this cgroup, in every hierarchy; down removes it.
	for d in /sys/fs/cgroup/*/; do
		case $d in */unified/ | */systemd/) continue ;; esac
		[[ -d $d ]] && mkdir -p "$d$CGROOT"
	done
	if [[ -d /sys/fs/cgroup/cpuset/$CGROOT ]]; then
		cp /sys/fs/cgroup/cpuset/cpuset.cpus /sys/fs/cgroup/cpuset/$CGROOT/cpuset.cpus
		cp /sys/fs/cgroup/cpuset/cpuset.mems /sys/fs/cgroup/cpuset/$CGROOT/cpuset.mems
	fi
	mkdir -p /sys/fs/cgroup/systemd/$CGROOT 2>/dev/null || true
}

# runtime_up starts the selected node's containerd and imports the images into it.
runtime_up() {
	sed -e "s|@N@|$N|g" -e "s|@DEB@|$CLUSTER_DEB_ROOT|g" -e "s|@RESTRICT_OOM@|$CONTAINERD_RESTRICT_OOM_SCORE_ADJ|g" \
		"$here/node/containerd.toml" >"$N/containerd.toml"
	mkdir -p "$N/cni/net.d"
	sed -e "s|@N@|$N|g" -e "s|@POD_CIDR@|$CIDR|g" "$here/node/cni.conflist" >"$N/cni/net.d/10-node.conflist"
	start containerd containerd --config "$N/containerd.toml"
	wait_for 30 "containerd on $NAME" ctr version
	local t
	for t in "$CLUSTER_IMAGES"/*.tar; do ctr images import "$t" >/dev/null; done
}

# kubelet_up starts the selected node's kube-proxy and kubelet.
kubelet_up() {
	local mode=$1
	subst "$here/node/kube-proxy.yaml" "$N/kube-proxy.yaml" -e "s|@MODE@|$mode|g"
	start kube-proxy "$CLUSTER_K8S_BIN/kube-proxy" --config="$N/kube-proxy.yaml" --v=2
	subst "$here/node/kubelet.yaml" "$N/kubelet.yaml" -e "s|@CLUSTER_DNS@|${CLUSTER_KUBELET_DNS:-$KUBE_DNS_IP}|g"
	start kubelet "$CLUSTER_K8S_BIN/kubelet" --config="$N/kubelet.yaml" --kubeconfig="$S/pki/kubelet-$NAME.kubeconfig" \
		--hostname-override=$NAME --node-ip=$IP --v=2
}

# on I CMD…: runs a function of this script with node I selected, in a subshell (so it may run in the background).
on() { (node_select "$1" && "${@:2}"); }

up() {
	local mode=$1 i
	mkdir -p "$L"
	declare -p CLUSTER_K8S_BIN CLUSTER_DEB_ROOT CLUSTER_IMAGES CLUSTER_DNSQ >"$S/env"
	mkdir -p "$S/node-2"
	netns_up
	for i in $nodes; do on $i anchor_up; done
	# Upstream DNS for names outside the cluster, one per node, and a second server on node-1 for the kube-dns
	# ConfigMap's stub domain: each answers every A question with one TEST-NET address, so a test sees which
	# one answered.
	start stub-upstream "$CLUSTER_DNSQ" serve -addr $STUB_UPSTREAM_IP:53 -a 192.0.2.53
	start stub-domain "$CLUSTER_DNSQ" serve -addr $STUB_DOMAIN_IP:53 -a 192.0.2.54
	on 2 start stub-upstream "$CLUSTER_DNSQ" serve -addr $STUB2_UPSTREAM_IP:53 -a 192.0.2.55
	bash "$here/pki.sh" "$S/pki" "$NODE_IP" "$KUBERNETES_SVC_IP" "$NODE_NAME" "$NODE2_NAME" >/dev/null
	mkdir -p "$S/etcd" && chmod 700 "$S/etcd"
	start etcd "$CLUSTER_K8S_BIN/etcd" --name node --data-dir "$S/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster node=http://127.0.0.1:2380 --quota-backend-bytes=1073741824 --log-level=warn
	local P=$S/pki
	start kube-apiserver "$CLUSTER_K8S_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
		--advertise-address=$NODE_IP --secure-port=6443 \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
		--kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
		--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc.$CLUSTER_DOMAIN \
		--service-cluster-ip-range=$SERVICE_CIDR --authorization-mode=Node,RBAC --allow-privileged=true \
		--kubelet-preferred-address-types=$APISERVER_KUBELET_ADDRESS_TYPES --v=1
	# Both runtimes and their image imports while the API server starts.
	local pids=()
	for i in $nodes; do
		on $i runtime_up &
		pids+=($!)
	done
	wait_for ${CLUSTER_ETCD_WAIT:-60} etcd in_node curl -sf http://127.0.0.1:2379/health
	wait_for 90 "the API server" kubectl get --raw /readyz
	for i in "${pids[@]}"; do wait "$i" || { log "a container runtime did not come up"; return 1; }; done
	start kube-controller-manager "$CLUSTER_K8S_BIN/kube-controller-manager" --kubeconfig="$P/kcm.kubeconfig" \
		--authentication-kubeconfig="$P/kcm.kubeconfig" --authorization-kubeconfig="$P/kcm.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
		--service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
		--cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
		--service-cluster-ip-range=$SERVICE_CIDR --flex-volume-plugin-dir="$S/flexvolume" --v=1
	start kube-scheduler "$CLUSTER_K8S_BIN/kube-scheduler" --kubeconfig="$P/scheduler.kubeconfig" \
		--authentication-kubeconfig="$P/scheduler.kubeconfig" --authorization-kubeconfig="$P/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --v=1
	for i in $nodes; do on $i kubelet_up "$mode"; done
	for i in $nodes; do
		on $i wait_for 120 "node-$i Ready" node_ready
		on $i wait_for 60 "kube-proxy on node-$i in $mode mode" proxy_mode "$mode"
	done
	wait_for 60 "the default ServiceAccount" kubectl -n default get serviceaccount default
}

subst() { # TEMPLATE OUT [sed args]: fills the @NAME@ placeholders shared by the nodes' config templates.
	local in=$1 out=$2
	shift 2
	sed -e "s|@S@|$S|g" -e "s|@N@|$N|g" -e "s|@NODE_NAME@|$NAME|g" -e "s|@NODE_IP@|$IP|g" -e "s|@POD_CIDR@|$CIDR|g" \
		-e "s|@KUBE_DNS_IP@|$KUBE_DNS_IP|g" -e "s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|g" \
		-e "s|@FAIL_CGROUP_V1@|$KUBELET_FAIL_CGROUP_V1|g" -e "s|@CGROUP_DRIVER@|$CGROUP_DRIVER|g" \
		-e "s|@CGROUP_ROOT@|/$CGROOT|g" -e "s|@SYNC_FREQUENCY@|$KUBELET_SYNC_FREQUENCY|g" \
		-e "s|@CONNTRACK_MAX_PER_CORE@|$KUBE_PROXY_CONNTRACK_MAX_PER_CORE|g" "$@" "$in" >"$out"
}
# kubectl runs in node-1 (the API server's node) whichever node is selected.
kubectl() {
	nsenter -t "$(cat "$S/logs/anchor.pid")" -m -n -- "$CLUSTER_K8S_BIN/kubectl" --kubeconfig="$S/pki/admin.kubeconfig" \
		--cache-dir="$S/kubectl-cache" "$@"
}
ctr() { in_node "$CLUSTER_DEB_ROOT/usr/bin/ctr" --address "$N/containerd/containerd.sock" -n k8s.io "$@"; }
node_ready() {
	[[ $(kubectl get node $NAME -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
proxy_mode() { [[ $(in_node curl -sf http://127.0.0.1:10249/proxyMode) == "$1" ]]; }

# stop NAME: TERM, then KILL after 10 s, by the PID up recorded in the selected node's logs.
stop() {
	local f=$L/$1.pid p
	[[ -f $f ]] || return 0
	p=$(cat "$f")
	if kill -0 "$p" 2>/dev/null; then
		kill "$p" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
		kill -9 "$p" 2>/dev/null || true
	fi
	rm -f "$f"
}

# node_down stops the selected node's kubelet, kube-proxy, pods and containerd, and kills what is left in its
# cgroups.
node_down() {
	[[ -d $L ]] || return 0
	stop kubelet
	stop kube-proxy
	# Pods: kill every container task (this ends their shims), then containerd.
	if [[ -f $L/containerd.pid ]] && kill -0 "$(cat "$L/containerd.pid")" 2>/dev/null; then
		for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
		sleep 1
		for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks rm -f "$t" >/dev/null 2>&1 || true; done
	fi
	stop containerd
	# Whatever is left in the node's cgroups (pod processes, shims) is ours: kill it by PID.
	local f p
	for f in $(find /sys/fs/cgroup/pids/$CGROOT -name cgroup.procs 2>/dev/null); do
		while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$f"
	done
	stop stub-upstream
}

# node_gone removes the selected node's cgroups, anchor and namespace.
node_gone() {
	local d
	for d in /sys/fs/cgroup/*/$CGROOT; do
		[[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	[[ -d $L ]] && stop anchor
	ip netns del $NS 2>/dev/null || true
	local left
	left=$(ls -d /sys/fs/cgroup/*/$CGROOT 2>/dev/null || true)
	[[ -z $left ]] || log "warning: cgroups left: $left"
}

down() {
	[[ -d $L ]] || return 0
	# Both nodes at once: each waits for its own processes to exit.
	local i pids=()
	for i in $nodes; do
		on $i node_down &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || true; done
	local p
	for p in $(pgrep -f "containerd-shim-runc-v2 -namespace k8s.io" || true); do
		grep -qF "$S" "/proc/$p/cmdline" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
	done
	stop kube-scheduler &
	stop kube-controller-manager &
	stop kube-apiserver &
	wait
	stop etcd
	stop stub-domain
	sleep 0.5
	for i in $nodes; do on $i node_gone; done
}

case ${1:-} in
up) up "${2:?usage: node.sh up nftables|iptables}" ;;
down) down ;;
exec) shift; node_select "${CLUSTER_NODE:-1}"; in_node "$@" ;;
*) echo "usage: node.sh up MODE | down | exec CMD..." >&2; exit 2 ;;
esac
