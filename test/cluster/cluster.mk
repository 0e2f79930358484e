# test/cluster/cluster.mk, included from the top Makefile: `make test-cluster` runs our manifests on a real
# single-node Kubernetes (built from k8s.io/kubernetes, cached under .cache/cluster) inside a throwaway network
# namespace, with kube-proxy in nftables mode and in iptables mode. Needs root. See test/cluster/run.sh.
#   make test-cluster                              both kube-proxy modes
#   make test-cluster CLUSTER_MODES=nftables       one mode
.PHONY: test-cluster

CLUSTER_MODES ?= nftables,iptables

test-cluster:
	CLUSTER_MODES='$(CLUSTER_MODES)' bash test/cluster/run.sh
