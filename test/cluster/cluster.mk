# test/cluster/cluster.mk, included from the top Makefile: `make test-cluster` runs our manifests on a real
# single-node Kubernetes (built from k8s.io/kubernetes, cached under .cache/cluster) inside a throwaway network
# namespace, with kube-proxy in nftables mode and in iptables mode. Needs root. See test/cluster/run.sh.
#   make test-cluster                              both kube-proxy modes
#   make test-cluster CLUSTER_MODES=nftables       one mode
# Both also run Kubernetes' own DNS conformance specs (e2e.test) through the cache in nftables mode;
# `make test-cluster-conformance` runs every conformance run and nothing else (test/cluster/README.md):
#   make test-cluster-conformance CLUSTER_CONFORMANCE=linklocal      one run
.PHONY: test-cluster test-cluster-conformance

CLUSTER_MODES ?= nftables,iptables
CLUSTER_CONFORMANCE ?= nftables
CLUSTER_CONFORMANCE_ALL := nftables,iptables,linklocal,rolling,control

test-cluster:
	CLUSTER_MODES='$(CLUSTER_MODES)' CLUSTER_CONFORMANCE='$(CLUSTER_CONFORMANCE)' bash test/cluster/run.sh

test-cluster-conformance:
	CLUSTER_MODES= CLUSTER_CONFORMANCE='$(if $(filter command line,$(origin CLUSTER_CONFORMANCE)),$(CLUSTER_CONFORMANCE),$(CLUSTER_CONFORMANCE_ALL))' \
		bash test/cluster/run.sh
