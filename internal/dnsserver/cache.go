//go:build !corednscache

package dnsserver

import (
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"

	"github.com/nodelocaldns/nodelocaldns/internal/clientsplugin"
	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// registerCache registers our cache directive (internal/dnscache), which the fast path answers from, with the
// per-client accounting's handler in front of its block's chain (clients_handler.go), counting into the
// starting Server's series (envOf).
func registerCache() {
	plugin.Register("cache", withClients(func(c *caddy.Controller) error { return dnscache.Setup(envOf().cache)(c) }))
}

// withClients runs setup, then puts the accounting's handler (clientsplugin.Handler) first in the block's chain:
// CoreDNS builds the chain from Config.Plugin in order, so whatever directive comes first, the handler sees each
// query the block gets and the answer the chain gave. Every block with a cache gets it (node-cache's Corefile
// caches in every block), once; it counts into the accounting the Server hands the configuration when it
// commits it (pendingConfig.clients), and into nothing before or when the accounting is off.
func withClients(setup caddy.SetupFunc) caddy.SetupFunc {
	return func(c *caddy.Controller) error {
		if err := setup(c); err != nil {
			return err
		}
		to := &pendingFor(c).clients
		cfg := dnsserver.GetConfig(c)
		h := func(next plugin.Handler) plugin.Handler { return &clientsplugin.Handler{Next: next, To: to} }
		cfg.Plugin = append([]plugin.Plugin{h}, cfg.Plugin...)
		return nil
	}
}
