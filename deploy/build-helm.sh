#!/usr/bin/env bash
# Builds helm from deploy/helmtool/go.mod into a cache directory keyed by the helm and Go versions, as
# test/cluster/build-k8s.sh does for Kubernetes: a second run finds it and returns at once. About 3 minutes cold on
# 2 cores; it uses the ordinary Go build cache (helm shares most of its graph with the main module's k8s.io deps).
#
# Usage: deploy/build-helm.sh [CACHE_DIR]      prints the helm binary's path on stdout (default CACHE_DIR .cache/helm)
# With HELM_NO_BUILD=1 it only looks: exit status 3 when helm is not built yet (the tests' -short mode).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-$here/../.cache/helm}
mod=$here/helmtool
version=$(awk '$1 == "helm.sh/helm/v3" { print $2; exit }' "$mod/go.mod")
gover=$(go env GOVERSION)
bin=$cache/helm-$version-$gover/helm
if [[ -x $bin ]]; then
	echo "$bin"
	exit 0
fi
if [[ ${HELM_NO_BUILD:-0} == 1 ]]; then
	echo "build-helm: $bin is not built (make helm)" >&2
	exit 3
fi
mkdir -p "$(dirname "$bin")"
echo "build-helm: building helm $version with $gover into $bin" >&2
start=$(date +%s)
# What `helm version` reports; helm's own Makefile sets the same.
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
# Build to a temporary name and rename, so an interrupted build never leaves a binary that looks complete.
(cd "$mod" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -ldflags "$ldflags" -o "$bin.tmp" helm.sh/helm/v3/cmd/helm) >&2
mv "$bin.tmp" "$bin"
echo "build-helm: built in $(($(date +%s) - start)) s" >&2
echo "$bin"
