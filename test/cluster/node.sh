#!/usr/bin/env bash
# One Kubernetes node in a throwaway network namespace: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd (+ runc, CNI bridge), kubelet and kube-proxy, all inside namespace $NS and a private
# mount namespace held by an "anchor" process. The namespace has no link to the machine's network: its eth0 is one
# end of a veth pair whose other end is in the same namespace. /run, /var/lib and /var/log are bind-mounted from the
# state directory inside the mount namespace, so containerd, the kubelet and CNI keep their default paths and
# nothing lands on the machine. The machine-specific settings come from machine.sh.
#
#   node.sh up MODE     MODE is kube-proxy's: nftables or iptables. Needs CLUSTER_STATE (empty dir to use),
#                       CLUSTER_K8S_BIN, CLUSTER_DEB_ROOT (extracted Debian packages), CLUSTER_IMAGES (tarballs),
#                       CLUSTER_DNSQ (test/cluster/cmd/dnsq, the stub DNS servers).
#   node.sh down        stops everything up started, by PID, and removes the namespace and cgroups (also after
#                       a failed or half-done up; safe to run twice)
#   node.sh exec CMD…   runs CMD inside the node's network and mount namespaces
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=machine.sh
source "$here/machine.sh"
S=${CLUSTER_STATE:?set CLUSTER_STATE}
# The namespace and the cgroup root are named after the state directory: two worktrees (or CI and a developer)
# may run the suite at once, and a fixed name made them share, and tear down, each other's node.
id=$(printf '%s' "$S" | sha1sum | cut -c1-8)
NS=nldns-$id
CGROOT=nldns-$id
L=$S/logs
# up records where everything is, so that down (and exec) need only CLUSTER_STATE.
if [[ ${1:-} != up && -f $S/env ]]; then
	# shellcheck source=/dev/null
	source "$S/env"
fi

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

netns_up() {
	# A namespace of this name is a previous run's from this same state directory that did not get torn down.
	if [[ -e /run/netns/$NS ]]; then
		log "removing a leftover namespace $NS"
		ip netns del $NS || true
	fi
	ip netns add $NS
	ip -n $NS link set lo up
	# Both ends of the veth live in the node's namespace: eth0 carries the node IP, and no packet can leave.
	ip -n $NS link add eth0 type veth peer name eth0p
	ip -n $NS addr add $NODE_IP/24 dev eth0
	ip -n $NS addr add $STUB_UPSTREAM_IP/32 dev eth0
	ip -n $NS addr add $STUB_DOMAIN_IP/32 dev eth0
	ip -n $NS link set eth0 up
	ip -n $NS link set eth0p up
	# Nothing answers at .1: the route gives the kubelet and kube-proxy a default interface to take the node IP from.
	ip -n $NS route add default via ${NODE_IP%.*}.1 dev eth0
	ip netns exec $NS sysctl -qw net.ipv4.ip_forward=1
	ip netns exec $NS sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

# The anchor holds the node's private mount namespace; every component enters it with nsenter.
anchor_up() {
	mkdir -p "$S/ns/run" "$S/ns/var-lib" "$S/ns/var-log" "$S/ns/sysctl"
	printf 'nameserver %s\n' "$STUB_UPSTREAM_IP" >"$S/resolv.conf"
	cat >"$S/anchor.sh" <<INIT
set -euo pipefail
mount --bind $S/ns/run /run
mount --bind $S/ns/var-lib /var/lib
mount --bind $S/ns/var-log /var/log
for s in $KUBELET_GLOBAL_SYSCTLS; do
	f=$S/ns/sysctl/\${s//\//_}
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
mount --bind $S/resolv.conf /etc/resolv.conf
echo \$\$ >$L/anchor.pid
exec sleep infinity
INIT
	nohup ip netns exec $NS unshare -m --propagation private bash "$S/anchor.sh" >"$L/anchor.log" 2>&1 &
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

up() {
	local mode=$1
	mkdir -p "$L"
	declare -p CLUSTER_K8S_BIN CLUSTER_DEB_ROOT CLUSTER_IMAGES CLUSTER_DNSQ >"$S/env"
	netns_up
	anchor_up
	# Upstream DNS for names outside the cluster, and a second server for the kube-dns ConfigMap's stub domain:
	# each answers every A question with one TEST-NET address, so a test sees which one answered.
	start stub-upstream "$CLUSTER_DNSQ" serve -addr $STUB_UPSTREAM_IP:53 -a 192.0.2.53
	start stub-domain "$CLUSTER_DNSQ" serve -addr $STUB_DOMAIN_IP:53 -a 192.0.2.54
	bash "$here/pki.sh" "$S/pki" "$NODE_NAME" "$NODE_IP" "$KUBERNETES_SVC_IP" >/dev/null
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
	wait_for ${CLUSTER_ETCD_WAIT:-60} etcd in_node curl -sf http://127.0.0.1:2379/health
	wait_for 90 "the API server" kubectl get --raw /readyz
	sed -e "s|@S@|$S|g" -e "s|@DEB@|$CLUSTER_DEB_ROOT|g" -e "s|@RESTRICT_OOM@|$CONTAINERD_RESTRICT_OOM_SCORE_ADJ|g" \
		"$here/node/containerd.toml" >"$S/containerd.toml"
	mkdir -p "$S/cni/net.d"
	sed -e "s|@S@|$S|g" -e "s|@POD_CIDR@|$POD_CIDR|g" "$here/node/cni.conflist" >"$S/cni/net.d/10-node.conflist"
	start containerd containerd --config "$S/containerd.toml"
	wait_for 30 containerd ctr version
	for t in "$CLUSTER_IMAGES"/*.tar; do ctr images import "$t" >/dev/null; done
	start kube-controller-manager "$CLUSTER_K8S_BIN/kube-controller-manager" --kubeconfig="$P/kcm.kubeconfig" \
		--authentication-kubeconfig="$P/kcm.kubeconfig" --authorization-kubeconfig="$P/kcm.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
		--service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
		--cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
		--service-cluster-ip-range=$SERVICE_CIDR --flex-volume-plugin-dir="$S/flexvolume" --v=1
	start kube-scheduler "$CLUSTER_K8S_BIN/kube-scheduler" --kubeconfig="$P/scheduler.kubeconfig" \
		--authentication-kubeconfig="$P/scheduler.kubeconfig" --authorization-kubeconfig="$P/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --v=1
	subst "$here/node/kube-proxy.yaml" "$S/kube-proxy.yaml" -e "s|@MODE@|$mode|g"
	start kube-proxy "$CLUSTER_K8S_BIN/kube-proxy" --config="$S/kube-proxy.yaml" --v=2
	subst "$here/node/kubelet.yaml" "$S/kubelet.yaml"
	start kubelet "$CLUSTER_K8S_BIN/kubelet" --config="$S/kubelet.yaml" --kubeconfig="$P/kubelet.kubeconfig" \
		--hostname-override=$NODE_NAME --node-ip=$NODE_IP --v=2
	wait_for 120 "node Ready" node_ready
	wait_for 60 "the default ServiceAccount" kubectl -n default get serviceaccount default
	wait_for 60 "kube-proxy in $mode mode" proxy_mode "$mode"
}

subst() { # TEMPLATE OUT [sed args]: fills the @NAME@ placeholders shared by the node's config templates.
	local in=$1 out=$2
	shift 2
	sed -e "s|@S@|$S|g" -e "s|@NODE_NAME@|$NODE_NAME|g" -e "s|@NODE_IP@|$NODE_IP|g" -e "s|@POD_CIDR@|$POD_CIDR|g" \
		-e "s|@KUBE_DNS_IP@|$KUBE_DNS_IP|g" -e "s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|g" \
		-e "s|@FAIL_CGROUP_V1@|$KUBELET_FAIL_CGROUP_V1|g" -e "s|@CGROUP_DRIVER@|$CGROUP_DRIVER|g" \
		-e "s|@CGROUP_ROOT@|/$CGROOT|g" -e "s|@SYNC_FREQUENCY@|$KUBELET_SYNC_FREQUENCY|g" \
		-e "s|@CONNTRACK_MAX_PER_CORE@|$KUBE_PROXY_CONNTRACK_MAX_PER_CORE|g" "$@" "$in" >"$out"
}
kubectl() { in_node "$CLUSTER_K8S_BIN/kubectl" --kubeconfig="$S/pki/admin.kubeconfig" --cache-dir="$S/kubectl-cache" "$@"; }
ctr() { in_node "$CLUSTER_DEB_ROOT/usr/bin/ctr" --address "$S/containerd/containerd.sock" -n k8s.io "$@"; }
node_ready() {
	[[ $(kubectl get node $NODE_NAME -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
proxy_mode() { [[ $(in_node curl -sf http://127.0.0.1:10249/proxyMode) == "$1" ]]; }

# stop NAME: TERM, then KILL after 10 s, by the PID up recorded.
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

down() {
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
	for p in $(pgrep -f "containerd-shim-runc-v2 -namespace k8s.io" || true); do
		grep -qF "$S" "/proc/$p/cmdline" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
	done
	stop kube-scheduler
	stop kube-controller-manager
	stop kube-apiserver
	stop etcd
	stop stub-upstream
	stop stub-domain
	sleep 0.5
	local d
	for d in /sys/fs/cgroup/*/$CGROOT; do
		[[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	stop anchor
	ip netns del $NS 2>/dev/null || true
	local left
	left=$(ls -d /sys/fs/cgroup/*/$CGROOT 2>/dev/null || true)
	[[ -z $left ]] || log "warning: cgroups left: $left"
}

case ${1:-} in
up) up "${2:?usage: node.sh up nftables|iptables}" ;;
down) down ;;
exec) shift; in_node "$@" ;;
*) echo "usage: node.sh up MODE | down | exec CMD..." >&2; exit 2 ;;
esac
