#!/usr/bin/env bash
# Builds Kubernetes' own end-to-end suite (`e2e.test`, from k8s.io/kubernetes/test/e2e), agnhost (its test
# images' multi-call binary, test/images/agnhost) and ginkgo (the runner that spreads the specs over parallel
# processes, at the version k8s.io/kubernetes requires) from the same module and staging replaces as the
# cluster's binaries (test/cluster/k8s/go.mod), into a cache directory beside them keyed by the Kubernetes and Go
# versions, as build-k8s.sh does: a second run finds them and returns at once. About 20 minutes cold here (2
# shared cores; 12 min of CPU). The Go build cache it needs (~3 GB) is private to this build and deleted after
# linking unless CLUSTER_KEEP_GOCACHE=1.
#
# Usage: test/cluster/build-e2e.sh CACHE_DIR      prints the directory holding e2e.test, agnhost and ginkgo
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build-e2e.sh CACHE_DIR}
# shellcheck source=k8s-build.sh
source "$here/k8s-build.sh"
bin=$cache/e2e-$version-$gover
done_marker=$bin/.complete

if [[ -f $done_marker && -x $bin/ginkgo ]]; then
	echo "$bin"
	exit 0
fi
log() { echo "build-e2e: $*" >&2; }
mkdir -p "$bin"
k8s_build_env "$cache/gocache-e2e"
start=$(date +%s)
log "building e2e.test, agnhost and ginkgo of Kubernetes $version with $gover into $bin"
cd "$mod"
# e2e.test is the test binary of package test/e2e, which registers every SIG's specs; go.sum covers it and
# agnhost although go.mod names neither (`go mod tidy` would drop those lines: see the comment in go.mod).
# Each is built only when missing.
[[ -x $bin/e2e.test ]] || go test -c -ldflags "$ldflags" -o "$bin/e2e.test" k8s.io/kubernetes/test/e2e >&2
[[ -x $bin/agnhost ]] || go build -ldflags "$ldflags" -o "$bin/agnhost" k8s.io/kubernetes/test/images/agnhost >&2
[[ -x $bin/ginkgo ]] || go build -ldflags "-s -w" -o "$bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo >&2
for c in e2e.test agnhost ginkgo; do [[ -x $bin/$c ]] || { log "missing $bin/$c"; exit 1; }; done
touch "$done_marker"
log "built in $(($(date +%s) - start)) s"
k8s_drop_cache
echo "$bin"
