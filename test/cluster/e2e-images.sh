#!/usr/bin/env bash
# The images Kubernetes' DNS conformance specs run (test/e2e/network/dns*.go), assembled offline: agnhost (its
# binary from the same k8s.io/kubernetes module, build-e2e.sh) and glibc-dns-testing (formerly jessie-dnsutils).
# Upstream builds both from a distribution image with dig, getent and a shell, and adds a CoreDNS binary that the
# "configurable pod resolv.conf" spec runs as /coredns. Here both are one Debian layer (the packages below and
# what they depend on, downloaded with apt-get and extracted with dpkg-deb, never installed, cached by their
# versions) with the static binaries on top; /coredns is the cluster's own kube-dns binary (cmd/kubedns).
#
# The suite names its images from a registry list (KUBE_TEST_REPO_LIST); ours points promoterE2eRegistry at a
# local prefix, and the tags come from `e2e.test --list-images` under that list, so they follow the suite's
# version. Nothing is pulled: the kubelet finds the imported tags present.
#
# Usage: test/cluster/e2e-images.sh CACHE_DIR E2E_DIR KUBEDNS OCIIMAGE OUT_DIR
#   writes OUT_DIR/repo-list.yaml and OUT_DIR/images/{agnhost,glibc-dns-testing}.tar
set -euo pipefail
cache=${1:?usage: e2e-images.sh CACHE_DIR E2E_DIR KUBEDNS OCIIMAGE OUT_DIR} e2e=${2:?} kubedns=${3:?} ociimage=${4:?} out=${5:?}
log() { echo "e2e-images: $*" >&2; }
source "$(dirname "$0")/../../scripts/apt.sh"
# What the probes run: sh (dash, and bash as upstream's images have it), dig (bind9-dnsutils), getent (libc-bin),
# hostname, seq, sleep, cat, test (coreutils), grep and sed.
pkgs=(dash bash coreutils bind9-dnsutils libc-bin hostname grep sed)
registry=localhost/e2e-test-images

closure() {
	apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
		"${pkgs[@]}" | grep -v '^[ <]' | sort -u
}
deps=$(closure)
versions() { apt-cache policy $deps | awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p, $2 }'; }
v=$(versions)
if [[ -z $deps ]] || grep -q '(none)' <<<"$v"; then
	apt_get update -qq
	deps=$(closure)
	v=$(versions)
fi
root=$cache/debian-e2e/root-$(sha1sum <<<"$v" | cut -c1-12)
if [[ ! -f $root/.complete ]]; then
	rm -rf "$root" "$cache/debian-e2e/dl"
	mkdir -p "$cache/debian-e2e/dl" "$root"
	# shellcheck disable=SC2086 # one word per package
	(cd "$cache/debian-e2e/dl" && apt_get download -qq -o APT::Sandbox::User=root $deps)
	for d in "$cache"/debian-e2e/dl/*.deb; do dpkg-deb -x "$d" "$root"; done
	# What a distribution image has and no package ships: root's entries (kubectl exec, id), and a name service
	# order that reads /etc/hosts first (getent hosts checks the kubelet's hosts file; glibc's default without
	# this file asks DNS first and stops at its NXDOMAIN).
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
	mkdir -p "$root/root" "$root/tmp"
	rm -rf "$root"/usr/share/{doc,man,info,locale}
	rm -rf "$cache/debian-e2e/dl"
	touch "$root/.complete"
	log "Debian layer: $(wc -l <<<"$deps") packages, $(du -sh "$root" | cut -f1)"
fi

mkdir -p "$out/images" "$out/bin"
printf 'promoterE2eRegistry: %s\n' "$registry" >"$out/repo-list.yaml"
images=$(KUBE_TEST_REPO_LIST=$out/repo-list.yaml "$e2e/e2e.test" --list-images)
# The suite lists more than one agnhost (a previous version for one upgrade spec); the one the DNS specs run is
# the module's own, test/images/agnhost/VERSION, which is also the agnhost built here. Other names are listed once.
moddir=$(cd "$(dirname "$0")/k8s" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' k8s.io/kubernetes)
tag() { # NAME: the suite's reference for image NAME under our registry list
	local t
	t=$(grep -E "^$registry/$1:" <<<"$images") || { log "e2e.test --list-images names no $registry/$1"; return 1; }
	if [[ $(wc -l <<<"$t") != 1 ]]; then
		t=$registry/$1:$(cat "$moddir/test/images/$1/VERSION")
		grep -qxF "$t" <<<"$images" || { log "e2e.test --list-images does not name $t"; return 1; }
	fi
	echo "$t"
}
agnhost=$(tag agnhost)
glibc=$(tag glibc-dns-testing)
cp "$kubedns" "$out/bin/coredns"
cp "$e2e/agnhost" "$out/bin/agnhost"
"$ociimage" -rootfs "$root" -binary "$out/bin/agnhost" -binary "$out/bin/coredns" -ref "$agnhost" \
	-o "$out/images/agnhost.tar" -- /agnhost
"$ociimage" -rootfs "$root" -binary "$out/bin/coredns" -ref "$glibc" \
	-o "$out/images/glibc-dns-testing.tar" -- /bin/bash
log "$agnhost and $glibc written to $out/images"
