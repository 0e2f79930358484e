package fastpath

import (
	"slices"
	"sort"
	"strings"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/cache"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/miekg/dns"
)

// preCache are the plugins that may run before cache in a block the fast path serves: on a cache hit they do
// nothing per query that a fast-path answer would skip (prometheus's counting is redone in metrics.go, and bufsize
// only rewrites the query, which the fast path keys by). Any other plugin before cache (log, dnstap, acl, any,
// chaos, loadbalance, rewrite, dns64, metadata, trace, ...) may answer, count or log per query, and its block
// is left to CoreDNS. Plugins after cache do not matter: what they answered is what the cache holds.
var preCache = []string{"bind", "bufsize", "debug", "errors", "health", "pprof", "prometheus", "ready", "reload", "timeouts"}

// block is one server block (a dnsserver.Config) as the fast path sees it.
type block struct {
	zone    string
	cache   cacheSettings
	metrics *metrics.Metrics // nil when the block has no prometheus plugin
	// afterMetrics is the plugin after prometheus in the chain: the responses_total plugin label of its answers.
	afterMetrics string
	reason       string // why its queries are left to CoreDNS; "" if the fast path serves them
}

// view is one CoreDNS server (one listening address) of one instance: replaced on every reload, so entries
// never outlive the caches they were learned from.
type view struct {
	srv    *dnsserver.Server
	zones  map[string][]*dnsserver.Config
	blocks map[*dnsserver.Config]*block
	store  *store
	series *seriesSet
}

func newView(srv *dnsserver.Server) (*view, string) {
	zones, ok := serverZones(srv)
	if !ok {
		return nil, "unknown coredns server layout"
	}
	v := &view{srv: srv, zones: zones, blocks: map[*dnsserver.Config]*block{}, series: newSeriesSet()}
	capacity := 0
	var reasons []string
	for zone, cfgs := range zones {
		for _, cfg := range cfgs {
			b := analyse(zone, cfg)
			v.blocks[cfg] = b
			if b.reason == "" {
				capacity += b.cache.pcap + b.cache.ncap
			} else {
				reasons = append(reasons, zone+" "+b.reason)
			}
		}
	}
	if capacity == 0 {
		sort.Strings(reasons)
		return nil, "no server block the fast path can serve: " + strings.Join(reasons, "; ")
	}
	v.store = newStore(capacity)
	return v, ""
}

func analyse(zone string, cfg *dnsserver.Config) *block {
	b := &block{zone: zone}
	if len(cfg.FilterFuncs) > 0 || cfg.ViewName != "" {
		b.reason = "view"
		return b
	}
	cacheAt := slices.Index(dnsserver.Directives, "cache")
	var c *cache.Cache
	handlers := cfg.Handlers()
	for i, h := range handlers {
		name := h.Name()
		if name == "prometheus" && i+1 < len(handlers) {
			b.afterMetrics = handlers[i+1].Name()
		}
		switch h := h.(type) {
		case *cache.Cache:
			c = h
		case *metrics.Metrics:
			b.metrics = h
		}
		if at := slices.Index(dnsserver.Directives, name); at < cacheAt && !slices.Contains(preCache, name) {
			b.reason = "plugin " + name + " runs before cache"
			return b
		}
	}
	if c == nil {
		b.reason = "no cache"
		return b
	}
	s, ok := readCache(c)
	switch {
	case !ok:
		b.reason = "unknown cache plugin layout"
	case s.prefetch > 0:
		b.reason = "cache prefetch"
	case s.staleUpTo > 0:
		b.reason = "cache serve_stale"
	case s.keepTTL:
		b.reason = "cache keepttl"
	}
	b.cache = s
	return b
}

// blockFor is the block CoreDNS's Server.ServeDNS picks for the lower-cased name q, or nil when it is not one
// the fast path serves (or the choice depends on more than the name).
func (v *view) blockFor(q string) *block {
	for off, end := 0, false; !end; off, end = dns.NextLabel(q, off) {
		if cfgs, ok := v.zones[q[off:]]; ok {
			return v.only(cfgs)
		}
	}
	if cfgs, ok := v.zones["."]; ok {
		return v.only(cfgs)
	}
	return nil
}

func (v *view) only(cfgs []*dnsserver.Config) *block {
	if len(cfgs) != 1 {
		return nil
	}
	if b := v.blocks[cfgs[0]]; b != nil && b.reason == "" {
		return b
	}
	return nil
}

func (v *view) eligibleZones() []string {
	var zs []string
	for _, b := range v.blocks {
		if b.reason == "" {
			zs = append(zs, b.zone)
		}
	}
	sort.Strings(zs)
	return zs
}
