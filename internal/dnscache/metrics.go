package dnscache

import (
	"errors"
	"sync"

	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
)

// cacheMetrics are CoreDNS's coredns_cache_* series: the same names, help and labels, so dashboards and alerts
// written for CoreDNS read ours. They live in prometheus's default registry, which CoreDNS's prometheus
// plugin serves (and which is process-wide: hence one set, made on first use, not at init). CoreDNS's cache
// plugin registers identical collectors at init when it is linked in (a test binary that runs both does);
// then registering ours returns its collectors, and both count into them, so a differential test tells the
// two caches apart by the server label.
type cacheMetrics struct {
	entries                                                           *prometheus.GaugeVec
	requests, hits, misses, prefetches, drops, servedStale, evictions *prometheus.CounterVec
}

var sharedMetrics = sync.OnceValue(func() *cacheMetrics {
	return &cacheMetrics{
		entries:     gauge("entries", "The number of elements in the cache.", "server", "type", "zones", "view"),
		requests:    counter("requests_total", "The count of cache requests.", "server", "zones", "view"),
		hits:        counter("hits_total", "The count of cache hits.", "server", "type", "zones", "view"),
		misses:      counter("misses_total", "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.", "server", "zones", "view"),
		prefetches:  counter("prefetch_total", "The number of times the cache has prefetched a cached item.", "server", "zones", "view"),
		drops:       counter("drops_total", "The number responses that are not cached, because the reply is malformed.", "server", "zones", "view"),
		servedStale: counter("served_stale_total", "The number of requests served from stale cache entries.", "server", "zones", "view"),
		evictions:   counter("evictions_total", "The count of cache evictions.", "server", "type", "zones", "view"),
	}
})

// RegisterMetrics registers the coredns_cache_* series now rather than at the first `cache` directive's setup:
// the agent does it with the other compiled-in plugins, whose series CoreDNS registers at init.
func RegisterMetrics() { sharedMetrics() }

func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return register(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace, Subsystem: "cache", Name: name, Help: help}, labels))
}

func gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace, Subsystem: "cache", Name: name, Help: help}, labels))
}

// register registers c, or returns the identical collector already registered.
func register[C prometheus.Collector](c C) C {
	err := prometheus.DefaultRegisterer.Register(c)
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
