package dnsserver

import (
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/forward"
)

// pendingConfig is what the directives of one configuration ask of the Server: health listeners, the longest
// lameduck, loop probes. caddy calls a setup function with nothing but a Controller, so the setups leave it
// in the storage of the instance they configure, and the Server reads it from the instance caddy returns
// (commit). A configuration that fails to start takes its pendingConfig with it.
type pendingConfig struct {
	health   map[string]bool
	metrics  map[string]bool // the `prometheus` directives' addresses
	lameduck time.Duration
	loops    []*loopHandler
	// clients is the accounting the `clients` handlers count into (cache.go's withClients), set by commit.
	clients atomic.Pointer[clients.Accounting]
	// forwards are our forward's stanzas, which commit tells which upstreams carry the client's address.
	forwards []*forward.Forward
}

type pendingKey struct{}

// pendingFor returns the pendingConfig of the instance c configures, creating it on first use.
func pendingFor(c *caddy.Controller) *pendingConfig {
	if p, ok := c.Get(pendingKey{}).(*pendingConfig); ok {
		return p
	}
	p := &pendingConfig{health: map[string]bool{}, metrics: map[string]bool{}}
	c.Set(pendingKey{}, p)
	return p
}

// pendingOf returns what the directives of inst asked for; nothing when none of ours was used.
func pendingOf(inst *caddy.Instance) *pendingConfig {
	inst.StorageMu.RLock()
	defer inst.StorageMu.RUnlock()
	if p, ok := inst.Storage[pendingKey{}].(*pendingConfig); ok {
		return p
	}
	return &pendingConfig{}
}
