#!/usr/bin/env bash
# make test-cluster: the project's manifests on a real two-node Kubernetes, in a throwaway network namespace,
# against kube-proxy in nftables mode and in iptables mode (iptables-nft). Needs root. Everything offline but the Go
# module proxy and Debian's archive:
#   - Kubernetes (and etcd) built from their Go modules, cached under .cache/cluster by version (build-k8s.sh);
#   - containerd, runc and the CNI plugins from Debian, downloaded and extracted there (never installed);
#   - the images built here: ours (make image), pause, kube-dns (CoreDNS with the kubernetes plugin), a client.
# Environment: CLUSTER_MODES (default "nftables,iptables"; empty: none); CLUSTER_CONFORMANCE (Kubernetes' DNS
# conformance runs, default "nftables"; empty: none); CLUSTER_LANES (clusters at once, default 2: each mode and each
# conformance run is a cluster of its own; 1 runs them one after the other); CLUSTER_CACHE (default .cache/cluster:
# binaries, packages).
# Closing line: `cluster: N passed, N failed`. The node's logs stay in out/cluster/state/<mode>/logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
cache=${CLUSTER_CACHE:-$repo/.cache/cluster}
out=$repo/out/cluster
started=$(date +%s)
log() { echo "test-cluster: $*" >&2; }
phase() { log "$1 done at +$(($(date +%s) - started)) s"; }
source scripts/apt.sh

if [[ $(id -u) != 0 ]]; then
	log "needs root (network namespaces, mounts, cgroups)"
	exit 1
fi
need=()
for t in nft:nftables iptables-nft:iptables conntrack:conntrack ip:iproute2 curl:curl openssl:openssl nsenter:util-linux \
	busybox:busybox-static; do
	command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if ((${#need[@]})); then
	log "installing ${need[*]}"
	apt_get update -qq && apt_get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$cache" "$out/bin" "$out/images"

# Kubernetes and etcd, cached by version.
k8s_bin=$(test/cluster/build-k8s.sh "$cache")
phase "Kubernetes binaries ($k8s_bin)"

# containerd, runc and the CNI plugins from Debian: downloaded and extracted, not installed (no service starts,
# nothing lands in /usr or /etc). Cached by the package versions.
debs=(containerd runc containernetworking-plugins)
candidates() { for p in "${debs[@]}"; do apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ { print $2 }'; done; }
versions=$(candidates | tr '\n' ' ')
if [[ $versions != *.*.*.* ]] || [[ $versions == *none* ]]; then
	apt_get update -qq
	versions=$(candidates | tr '\n' ' ')
fi
deb_root=$cache/debian/root-$(echo "$versions" | sha1sum | cut -c1-12)
if [[ ! -f $deb_root/.complete ]]; then
	rm -rf "$deb_root" "$cache/debian/dl"
	mkdir -p "$cache/debian/dl" "$deb_root"
	(cd "$cache/debian/dl" && apt_get download -qq -o APT::Sandbox::User=root "${debs[@]}")
	for d in "$cache"/debian/dl/*.deb; do dpkg-deb -x "$d" "$deb_root"; done
	touch "$deb_root/.complete"
fi
phase "Debian packages ($versions)"

# Images, offline. Ours exactly as `make image` builds it; the others from test/cluster/cmd.
make --no-print-directory image IMAGE_OUT="$out" IMAGE_TAR="$out/images/nodelocaldns.tar" >/dev/null
# The driver's own unit tests first (test/cluster is a module of its own, outside `make test`'s ./...).
(cd test/cluster && CGO_ENABLED=0 go test -count=1 ./driver && \
	CGO_ENABLED=0 go build -o "$out/bin/" ./cmd/dnsq ./cmd/kubedns ./cmd/ociimage ./driver)
"$out/bin/ociimage" -binary "$out/bin/dnsq" -ref localhost/cluster/pause:1 -o "$out/images/pause.tar" -- /dnsq pause
"$out/bin/ociimage" -binary "$out/bin/dnsq" -ref localhost/cluster/client:1 -o "$out/images/client.tar" -- /dnsq
"$out/bin/ociimage" -binary "$out/bin/kubedns" -ref localhost/cluster/kube-dns:1 -o "$out/images/kube-dns.tar" -- /kubedns
phase "images"

# Kubernetes' own DNS conformance specs (driver/conformance.go; test/cluster/README.md): e2e.test and agnhost from
# the same k8s.io/kubernetes module, cached beside the Kubernetes binaries, and the images its DNS specs run.
conformance=${CLUSTER_CONFORMANCE-nftables}
e2e_args=()
if [[ -n $conformance ]]; then
	e2e_bin=$(test/cluster/build-e2e.sh "$cache")
	test/cluster/e2e-images.sh "$cache" "$e2e_bin" "$out/bin/kubedns" "$out/bin/ociimage" "$out/e2e"
	e2e_args=(-e2e "$e2e_bin" -e2e-images "$out/e2e/images" -e2e-repo-list "$out/e2e/repo-list.yaml" -conformance "$conformance")
	phase "e2e.test and its images"
fi

# The driver tears each node down itself; this trap is the last resort if the driver itself dies.
state=$out/state
cleanup() {
	for d in "$state"/*/; do
		[[ -d $d/logs ]] && CLUSTER_STATE=${d%/} test/cluster/node.sh down || true
	done
}
trap cleanup EXIT
rm -f "$state/summary.txt" # the driver writes this run's failures and count there, for .ci/run to say again
rc=0
"$out/bin/driver" -repo "$repo" -state "$state" -k8s-bin "$k8s_bin" -deb-root "$deb_root" -images "$out/images" \
	-dnsq "$out/bin/dnsq" -agent "$out/nodelocaldns" -modes "${CLUSTER_MODES-nftables,iptables}" -lanes "${CLUSTER_LANES:-2}" "${e2e_args[@]}" || rc=$?
phase "suite"
exit $rc
