package dnscache

import (
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
)

// Servers are the UDP servers of one CoreDNS instance whose blocks have a cache, as CoreDNS announces them:
// every cache's setup installs dnsserver.Config.UDPDecorateWriterFunc, which CoreDNS (1.15) calls once per
// server in ServePacket with the *dnsserver.Server (the last block sharing a listener wins; all of ours do the
// same). That server's exported ServeDNS is what the fast path hands misses to. Servers live in the instance's
// caddy storage, so an instance and its servers go together.
type Servers struct {
	mu       sync.Mutex
	expected map[string]bool              // "host:port" of every plain-DNS listener a cache's block has
	got      map[string]*dnsserver.Server // by "host:port"
	caches   map[string][]*Cache          // the caches of the blocks on each "host:port"
	changed  chan struct{}                // closed and replaced on each announcement
}

type serversKey struct{}

// ServersOf returns inst's Servers, or nil when no block of inst has a cache.
func ServersOf(inst *caddy.Instance) *Servers {
	inst.StorageMu.RLock()
	defer inst.StorageMu.RUnlock()
	s, _ := inst.Storage[serversKey{}].(*Servers)
	return s
}

// announce makes cfg's plain-DNS UDP servers announce themselves in the instance's Servers. A block where
// another plugin installed a decorator keeps it (and the fast path does not serve its listener).
func announce(c *caddy.Controller, cfg *dnsserver.Config, ca *Cache) {
	if cfg.Transport != "dns" || cfg.UDPDecorateWriterFunc != nil {
		return
	}
	s, _ := c.Get(serversKey{}).(*Servers)
	if s == nil {
		s = &Servers{expected: map[string]bool{}, got: map[string]*dnsserver.Server{}, caches: map[string][]*Cache{},
			changed: make(chan struct{})}
		c.Set(serversKey{}, s)
	}
	s.mu.Lock()
	for _, h := range cfg.ListenHosts {
		a := net.JoinHostPort(h, cfg.Port)
		s.expected[a] = true
		s.caches[a] = append(s.caches[a], ca)
	}
	s.mu.Unlock()
	cfg.UDPDecorateWriterFunc = func(srv *dnsserver.Server) dns.DecorateWriter {
		s.add(srv)
		return nil // the writer is miekg/dns's own
	}
}

func (s *Servers) add(srv *dnsserver.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[strings.TrimPrefix(srv.Addr, "dns://")] = srv
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wait returns the servers announced, by host:port, once every expected one is, or when timeout passes.
// caddy starts ServePacket in a goroutine just before its Start returns, so the wait is short.
func (s *Servers) Wait(timeout time.Duration) map[string]*dnsserver.Server {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		got, complete, changed := s.snapshot()
		if complete {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			got, _, _ = s.snapshot()
			return got
		}
	}
}

func (s *Servers) snapshot() (map[string]*dnsserver.Server, bool, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	complete := true
	for a := range s.expected {
		complete = complete && s.got[a] != nil
	}
	return maps.Clone(s.got), complete, s.changed
}

// Caches are the caches of the blocks served on addr ("host:port").
func (s *Servers) Caches(addr string) []*Cache {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.caches[addr])
}
