//go:build !corednscache

package dnsserver

import (
	"github.com/coredns/coredns/plugin"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// registerCache registers our cache directive (internal/dnscache), which the fast path answers from.
func registerCache() {
	plugin.Register("cache", dnscache.Setup)
	dnscache.RegisterMetrics()
}
