// Package corefile turns the node-local-dns and kube-dns ConfigMaps into the Corefile the embedded CoreDNS serves.
//
// [Render] is pure: it substitutes node-cache's template variables into Corefile.base and appends one stub-domain
// server block per kube-dns stub domain (sorted, so the output is deterministic), and [Validate] parses the result
// with the directive list it is given. The one side effect is [LoadKubeDNS] (load.go), which reads a ConfigMap
// volume directory and validates what it read; nothing here writes, starts a server or touches the network.
//
// Every value that reaches the Corefile from a ConfigMap is checked against a whitelist grammar (a DNS-1123
// domain, an IP address with an optional port and dns:// or tls:// scheme) and written back in canonical form, so
// no ConfigMap value can inject Corefile text: whitespace, braces, quotes, '#' and newlines cannot pass.
//
// Watching the ConfigMap volumes for changes is internal/configwatch's job; this package only reads and renders.
//
// May touch: the kube-dns ConfigMap volume's files, read-only (LoadKubeDNS, through volume).
package corefile
