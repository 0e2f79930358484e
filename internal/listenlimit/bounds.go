package listenlimit

// The bounds of every listener the agent opens itself, in one place: each kind is one Pool (all of its
// listeners together), and WorstCaseBytes, which the memory check adds to its worst case, sums them. A new kind
// of listener gets its bound here, or it cannot be opened (open.go).
//
// The TCP ones are reachable from every pod on the node (hostNetwork, and the Corefile's addresses are usually
// the wildcard or the node-local IP): each source gets a few connections, so a pod holding idle connections
// keeps no other client out, and each Total is above a node's pod count (the kubelet's --max-pods is 110 by
// default, 250 at most as Kubernetes tests it), so a source with no connection always finds a place.

// Health is the Corefile's `health` listeners (/health and /ready): the node's own probes come from a
// local address, one source with 4 places of its own. Held at most the read timeout (1 s) when idle.
func Health() Limits { return Limits{PerSource: 4, Total: 256} }

// HealthSocket is the Unix socket the kubelet's exec probes use (-health-socket), in the pod's emptyDir:
// only this container reaches it, and every client there is one source.
func HealthSocket() Limits { return Limits{PerSource: 16, Total: 16} }

// AgentMetrics is -metrics-listen-address: a scraper keeps one connection, two across a reconnect.
func AgentMetrics() Limits { return Limits{PerSource: 2, Total: 256} }

// CoreDNSMetrics is the Corefile's `prometheus` listeners (CoreDNS's series, :9253 in the standard
// Corefile), as AgentMetrics.
func CoreDNSMetrics() Limits { return Limits{PerSource: 2, Total: 256} }

// ConnWorstCaseBytes is what one held idle connection of these HTTP listeners is counted for: a goroutine, the
// server's read buffer and the kernel's socket, charged to the agent's cgroup. Measured (issue 39, CoreDNS's
// unbounded :9253): 20,000 idle connections took the agent from 39 to 370 MB, 16.5 KiB each.
const ConnWorstCaseBytes = 17 << 10

// all is every bound above, for WorstCaseBytes.
func all() []Limits { return []Limits{Health(), HealthSocket(), AgentMetrics(), CoreDNSMetrics()} }

// WorstCaseBytes is the most the connections of every listener opened through this package take when each
// bound is full: Total × ConnWorstCaseBytes for each.
func WorstCaseBytes() int64 {
	var b int64
	for _, l := range all() {
		b += int64(l.Total) * ConnWorstCaseBytes
	}
	return b
}
