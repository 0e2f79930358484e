// Package configmap holds the end-to-end tests of the ConfigMap path: the real agent, a kube-dns ConfigMap volume and a
// node-local-dns (Corefile.base) volume written with the kubelet's AtomicWriter semantics, and real DNS clients.
// They prove that stub domain and upstream changes reach the answers within milliseconds, that bad updates keep
// the old configuration serving and are counted, that bursts coalesce, and that reloads drop no query and never
// blink the liveness probe. Everything runs in a throwaway network namespace (internal/testenv).
package configmap
