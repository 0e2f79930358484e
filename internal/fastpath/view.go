package fastpath

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/metrics"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// preCache are the plugins that may run before cache in a block the fast path serves: on a cache hit they do
// nothing per query that a fast-path answer would skip (prometheus's counting is redone in metrics.go, and bufsize
// only rewrites the query, which the fast path keys by; clients, internal/clients' handler, is counted by the
// readers themselves). Any other plugin before cache (log, dnstap, acl, any,
// chaos, loadbalance, rewrite, dns64, metadata, trace, ...) may answer, count or log per query, and its block
// is left to CoreDNS. Plugins after cache do not matter: what they answered is what the cache holds.
var preCache = []string{"bind", "bufsize", "clients", "debug", "errors", "health", "pprof", "prometheus", "ready", "reload", "timeouts"}

// block is one server block (a dnsserver.Config with our cache) as the fast path sees it.
type block struct {
	zone    string
	metrics *metrics.Metrics // nil when the block has no prometheus plugin
	// afterMetrics is the plugin after prometheus in the chain: the responses_total plugin label of its answers.
	afterMetrics string
	reason       string // why its queries are left to CoreDNS; "" if the fast path serves them
}

// view is one CoreDNS server (one listening address) of one instance: replaced on every reload, so entries
// never outlive the caches they were learned from.
type view struct {
	srv    *dnsserver.Server
	blocks map[*dnscache.Cache]*block // the blocks on this server, by their cache
	store  *store
	series *seriesSet
	now    func() time.Time // the Path's clock
	// ctx is what CoreDNS's server puts in a query's context before its chain (the server, the loop count),
	// made once: two allocations per miss otherwise.
	ctx context.Context
}

func newView(cl coreListener, now func() time.Time, hists *histSet) (*view, string) {
	v := &view{srv: cl.srv, blocks: map[*dnscache.Cache]*block{}, series: newSeriesSet(hists), now: now}
	v.ctx = context.WithValue(context.WithValue(context.Background(), dnsserver.Key{}, v.srv), dnsserver.LoopKey{}, 0)
	capacity := 0
	var reasons []string
	for _, c := range cl.caches {
		b := analyse(c.Config())
		v.blocks[c] = b
		if b.reason == "" {
			capacity += c.Capacity()
		} else {
			reasons = append(reasons, b.zone+" "+b.reason)
		}
	}
	if capacity == 0 {
		sort.Strings(reasons)
		return nil, "no server block the fast path can serve: " + strings.Join(reasons, "; ")
	}
	v.store = newStore(capacity)
	return v, ""
}

// analyse says whether a cache hit in cfg does anything but answer from the cache and count.
func analyse(cfg *dnsserver.Config) *block {
	b := &block{}
	if cfg == nil {
		b.reason = "no server block"
		return b
	}
	b.zone = cfg.Zone
	if len(cfg.FilterFuncs) > 0 || cfg.ViewName != "" {
		b.reason = "view"
		return b
	}
	cacheAt := slices.Index(dnsserver.Directives, "cache")
	handlers := cfg.Handlers()
	for i, h := range handlers {
		name := h.Name()
		if name == "prometheus" && i+1 < len(handlers) {
			b.afterMetrics = handlers[i+1].Name()
		}
		switch m := h.(type) {
		case *metrics.Metrics:
			b.metrics = m
		case interface{ Upstream() *metrics.Metrics }: // the agent's handler in its place (internal/dnsserver)
			b.metrics = m.Upstream()
		}
		if _, ok := h.(*dnscache.Cache); ok {
			return b
		}
		if at := slices.Index(dnsserver.Directives, name); at < cacheAt && !slices.Contains(preCache, name) {
			b.reason = "plugin " + name + " runs before cache"
			return b
		}
	}
	b.reason = "no cache"
	return b
}

// servable is the block of the cache c on this server, if the fast path serves it.
func (v *view) servable(c *dnscache.Cache) *block {
	if b := v.blocks[c]; b != nil && b.reason == "" {
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
