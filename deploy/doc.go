// Package deploy holds the Kubernetes manifests (base/ and overlays/, kustomize layout), the Dockerfile and the
// `make image` fragment; its only code is [StandardCorefile], the ConfigMap's Corefile for tests and the demo,
// and [DaemonSet], the base DaemonSet for the tests that run its probes.
//
// Its tests are the manifests' contract: every overlay renders with kustomize's own library (krusty), decodes
// strictly into the Kubernetes API types, keeps the standard nodelocaldns.yaml's objects and arguments, and holds
// the least-privilege invariants (capabilities, no hostPath, read-only root, probes that reach the pod's own agent
// alone). The image tests run `make image` and inspect the tarball it writes.
package deploy
