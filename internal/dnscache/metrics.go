package dnscache

import (
	"errors"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are CoreDNS's coredns_cache_* series: the same names, help and labels, so dashboards and alerts
// written for CoreDNS read ours. Whoever runs the caches makes one set with the registry it serves
// (NewMetrics) and hands it to every `cache` directive it sets up (Setup), so that the counts carry on across
// reloads. CoreDNS's cache plugin registers identical collectors into the default registry at init when it is
// linked in (a test binary that runs both does); a set made with that registry then takes its collectors, and
// both count into them, so a differential test tells the two caches apart by the server label.
type Metrics struct {
	entries                                                           *entriesGauge
	requests, hits, misses, prefetches, drops, servedStale, evictions *prometheus.CounterVec
}

// NewMetrics makes the series and registers them with reg; nil registers them nowhere (a cache built by a
// test, counting for no one).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: plugin.Namespace, Subsystem: "cache", Name: name, Help: help}, labels))
	}
	return &Metrics{
		entries:     newEntriesGauge(reg),
		requests:    counter("requests_total", "The count of cache requests.", "server", "zones", "view"),
		hits:        counter("hits_total", "The count of cache hits.", "server", "type", "zones", "view"),
		misses:      counter("misses_total", "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.", "server", "zones", "view"),
		prefetches:  counter("prefetch_total", "The number of times the cache has prefetched a cached item.", "server", "zones", "view"),
		drops:       counter("drops_total", "The number responses that are not cached, because the reply is malformed.", "server", "zones", "view"),
		servedStale: counter("served_stale_total", "The number of requests served from stale cache entries.", "server", "zones", "view"),
		evictions:   counter("evictions_total", "The count of cache evictions.", "server", "type", "zones", "view"),
	}
}

// entriesGauge is coredns_cache_entries. CoreDNS's cache sets it on every insert, to its caches' Len, which
// takes a read lock on each of 256 shards, twice: 12% of the agent's CPU per miss in the bench's miss workload.
// Ours counts when scraped instead: each label set reads the cache that inserted under it last, which is the
// value CoreDNS's last Set left. A cache whose instance stops leaves its counts then, so that the series keeps
// them (as CoreDNS's does) without holding the cache.
//
// When CoreDNS's cache plugin is linked in (a differential test's binary), its gauge is registered first, and
// ours sets that one on every insert as CoreDNS's does (vec).
type entriesGauge struct {
	desc *prometheus.Desc
	vec  *prometheus.GaugeVec // CoreDNS's, when it was registered first; then the rest is unused

	mu     sync.Mutex
	series map[entriesKey]*entriesSeries
}

type entriesKey struct{ server, zones, view string }

// entriesSeries is one label set's source: the cache that inserted last, or the counts it left.
type entriesSeries struct{ src atomic.Pointer[entriesSource] }

type entriesSource struct {
	c               *Cache // nil: the counts below, left by a cache that stopped
	success, denial int
}

func newEntriesGauge(reg prometheus.Registerer) *entriesGauge {
	const name, help = "entries", "The number of elements in the cache."
	labels := []string{"server", "type", "zones", "view"}
	g := &entriesGauge{series: map[entriesKey]*entriesSeries{},
		desc: prometheus.NewDesc(prometheus.BuildFQName(plugin.Namespace, "cache", name), help, labels, nil)}
	if vec, ok := register[prometheus.Collector](reg, g).(*prometheus.GaugeVec); ok {
		g.vec = vec
	}
	return g
}

func (g *entriesGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *entriesGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, s := range g.series {
		src := s.src.Load()
		if src == nil {
			continue // made by an insert that has not stored itself yet: no Set yet, in CoreDNS's terms
		}
		p, n := src.success, src.denial
		if src.c != nil {
			p, n = src.c.Len()
		}
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(p), k.server, Success, k.zones, k.view)
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n), k.server, Denial, k.zones, k.view)
	}
}

// inserted records that c inserted under the server's label set: from now on its counts are the series'.
func (g *entriesGauge) inserted(c *Cache, server string) {
	if g.vec != nil {
		p, n := c.Len()
		g.vec.WithLabelValues(server, Success, c.zonesLabel, c.viewLabel).Set(float64(p))
		g.vec.WithLabelValues(server, Denial, c.zonesLabel, c.viewLabel).Set(float64(n))
		return
	}
	s := c.entriesSeries(server)
	if src := s.src.Load(); src == nil || src.c != c {
		s.src.Store(&entriesSource{c: c})
	}
}

// seriesFor is the series of a label set, made on first use.
func (g *entriesGauge) seriesFor(k entriesKey) *entriesSeries {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.series[k]
	if s == nil {
		s = &entriesSeries{}
		g.series[k] = s
	}
	return s
}

// stopped leaves c's counts in the series it is the source of.
func (g *entriesGauge) stopped(c *Cache) {
	m := c.entries.Load()
	if m == nil {
		return
	}
	for _, s := range *m {
		if src := s.src.Load(); src != nil && src.c == c {
			p, n := c.Len()
			s.src.CompareAndSwap(src, &entriesSource{success: p, denial: n})
		}
	}
}

// register registers c with reg, or returns the identical collector already registered; with no reg, c.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if ex, ok := are.ExistingCollector.(C); ok {
			return ex
		}
	}
	// Registered, or refused as inconsistent with another collector of the name (not ours to fix): ours
	// counts either way.
	return c
}

// entriesSeries is the coredns_cache_entries series c counts into for server, resolved once per server (a
// cache serves each of its block's addresses).
func (c *Cache) entriesSeries(server string) *entriesSeries {
	if m := c.entries.Load(); m != nil {
		if s := (*m)[server]; s != nil {
			return s
		}
	}
	c.entriesMu.Lock()
	defer c.entriesMu.Unlock()
	m := map[string]*entriesSeries{}
	if old := c.entries.Load(); old != nil {
		if s := (*old)[server]; s != nil {
			return s
		}
		m = maps.Clone(*old)
	}
	s := c.metrics.entries.seriesFor(entriesKey{server: server, zones: c.zonesLabel, view: c.viewLabel})
	m[server] = s
	c.entries.Store(&m)
	return s
}
