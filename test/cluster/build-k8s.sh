#!/usr/bin/env bash
# Builds the Kubernetes components (and etcd) of the test node from test/cluster/k8s/go.mod into a cache directory
# keyed by the Kubernetes and Go versions, like kernel/ caches its kernel image: a second run finds them and
# returns at once. About 6 minutes cold on 2 cores; the Go build cache it needs (~3 GB) is private to this build
# and deleted after linking unless CLUSTER_KEEP_GOCACHE=1, since the linked binaries are what is kept.
#
# Usage: test/cluster/build-k8s.sh CACHE_DIR      prints the bin directory on stdout
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build-k8s.sh CACHE_DIR}
# shellcheck source=k8s-build.sh
source "$here/k8s-build.sh"
bin=$cache/k8s-$version-$gover/bin
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
done_marker=$bin/.complete

if [[ -f $done_marker ]]; then
	echo "$bin"
	exit 0
fi
log() { echo "build-k8s: $*" >&2; }
mkdir -p "$bin"
k8s_build_env "$cache/gocache-k8s"
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
start=$(date +%s)
log "building Kubernetes $version (${cmds[*]}) and etcd with $gover into $bin (cold: about 6 min on 2 cores)"
cd "$mod"
# One go build for all: the links overlap with the compiles of the next package.
go build -ldflags "$ldflags" -o "$bin/" "${pkgs[@]}" >&2
go build -ldflags "-s -w" -o "$bin/etcd" ./cmd/etcd >&2
for c in "${cmds[@]}" etcd; do [[ -x $bin/$c ]] || { log "missing $bin/$c"; exit 1; }; done
touch "$done_marker"
log "built in $(($(date +%s) - start)) s"
k8s_drop_cache
echo "$bin"
