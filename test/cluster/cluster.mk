# test/cluster/cluster.mk, included from the top Makefile: `make test-cluster` runs our manifests on a real
# two-node Kubernetes (built from k8s.io/kubernetes, cached under .cache/cluster) inside a throwaway network
# namespace, with kube-proxy in nftables mode and in iptables mode. Needs root. See test/cluster/run.sh.
#   make test-cluster                              both kube-proxy modes
#   make test-cluster CLUSTER_MODES=nftables       one mode
#   make test-cluster CLUSTER_LANES=1              one cluster at a time (default 2: each mode and each
#                                                  conformance run is a cluster of its own, two at once)
# Both also run Kubernetes' own DNS conformance specs (e2e.test) through the cache in nftables mode;
# `make test-cluster-conformance` runs every conformance run and nothing else (test/cluster/README.md):
#   make test-cluster-conformance CLUSTER_CONFORMANCE=linklocal      one run
.PHONY: test-cluster test-cluster-conformance test-cluster-build

CLUSTER_MODES ?= nftables,iptables
CLUSTER_CONFORMANCE ?= nftables
CLUSTER_CONFORMANCE_ALL := nftables,iptables,linklocal,rolling,control

CLUSTER_LANES ?= 2

test-cluster:
	CLUSTER_MODES='$(CLUSTER_MODES)' CLUSTER_CONFORMANCE='$(CLUSTER_CONFORMANCE)' CLUSTER_LANES='$(CLUSTER_LANES)' bash test/cluster/run.sh

test-cluster-conformance:
	CLUSTER_LANES='$(CLUSTER_LANES)' CLUSTER_MODES= CLUSTER_CONFORMANCE='$(if $(filter command line,$(origin CLUSTER_CONFORMANCE)),$(CLUSTER_CONFORMANCE),$(CLUSTER_CONFORMANCE_ALL))' \
		bash test/cluster/run.sh

# Only the builds test-cluster needs, into the same cache (Kubernetes and etcd; e2e.test, agnhost and ginkgo when a
# conformance run is asked for), through one Go build cache (K8S_SHARED_GOCACHE, k8s-build.sh), deleted after:
# .ci/run starts it at idle priority beside `make test-ci`, whose end-to-end tests leave the CPU idle much of the
# time, so that test-cluster finds them built. build-k8s.sh and build-e2e.sh each say what they build and how long
# it took.
CLUSTER_CACHE ?= $(CURDIR)/.cache/cluster
test-cluster-build:
	@rm -rf $(CLUSTER_CACHE)/gocache-shared; status=0; \
	K8S_SHARED_GOCACHE=$(CLUSTER_CACHE)/gocache-shared test/cluster/build-k8s.sh $(CLUSTER_CACHE) >/dev/null || status=1; \
	$(if $(CLUSTER_CONFORMANCE),[ $$status != 0 ] || K8S_SHARED_GOCACHE=$(CLUSTER_CACHE)/gocache-shared test/cluster/build-e2e.sh $(CLUSTER_CACHE) >/dev/null || status=1;) \
	rm -rf $(CLUSTER_CACHE)/gocache-shared; exit $$status
