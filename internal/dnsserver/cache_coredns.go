//go:build corednscache

package dnsserver

// A build with -tags corednscache links CoreDNS's own cache plugin instead of ours, as node-cache does: the
// bench's node-cache-like row (bench/serve), so that it measures node-cache's cache and not ours. The fast path
// finds no cache it can answer from there, and CoreDNS answers every query. Not a product build.
import _ "github.com/coredns/coredns/plugin/cache" // registers "cache" at init

func registerCache() {}
