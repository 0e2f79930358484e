# shellcheck shell=bash
# What build-k8s.sh and build-e2e.sh share (sourced, with $here set to test/cluster): the Kubernetes version from
# k8s/go.mod, the Go version, and the version ldflags Kubernetes' release build sets through hack/lib (what
# `kubectl version`, the API server and the e2e suite report).
mod=$here/k8s
version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$mod/go.mod")
gover=$(go env GOVERSION)
minor=${version#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
# k8s_build_env GOCACHE: static, reproducible builds from the module's go.sum, in a build cache of their own, which
# k8s_drop_cache deletes once the binaries are linked. K8S_SHARED_GOCACHE, when set, is one cache for both builds,
# deleted by whoever set it (make test-cluster-build): 90% of e2e.test's packages are also Kubernetes' (same flags,
# so the compiles are shared), and the e2e build then compiles mostly its own.
k8s_build_env() {
	export GOCACHE=${K8S_SHARED_GOCACHE:-$1} GOFLAGS="-mod=readonly -buildvcs=false -trimpath" CGO_ENABLED=0
}
k8s_drop_cache() {
	[[ -n ${K8S_SHARED_GOCACHE:-} || ${CLUSTER_KEEP_GOCACHE:-0} == 1 ]] || rm -rf "$GOCACHE"
}
