// Package dnscache is our implementation of CoreDNS's cache plugin: the `cache` directive with CoreDNS 1.15's
// syntax, options, semantics and coredns_cache_* metrics (its README is the user's reference), registered under
// the same name in our build (internal/dnsserver), and proven equal to CoreDNS's by a differential test
// (differential_test.go) that runs the same query streams through both.
//
// It exists so that the fast path (internal/fastpath) can answer from a cache it may read: entries are our
// type, compared by pointer, with a public API that says whether a hit would be a plain one (ServeFast), and a
// context value through which ServeDNS reports which entry answered (WithReport). It differs from CoreDNS's in
// one way, on purpose: an entry holds its response packed and at most MaxMsgBytes of it, so that the memory a
// cache can take is bounded (KeyWorstCaseBytes a key), where CoreDNS's holds any response as parsed records.
//
// May touch: nothing.
package dnscache

import (
	"encoding/binary"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/cache"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// The cache types, as the metrics' type label names them.
const (
	Success = "success"
	Denial  = "denial"
)

const (
	maxTTL     = dnsutil.MaximumDefaultTTL
	minTTL     = dnsutil.MinimalDefaultTTL
	maxNTTL    = dnsutil.MaximumDefaultTTL / 2
	minNTTL    = dnsutil.MinimalDefaultTTL
	defaultCap = 10000
)

// Cache is one block's cache plugin.
type Cache struct {
	Next  plugin.Handler
	Zones []string

	zonesLabel, viewLabel string
	counted               atomic.Pointer[countedSeries] // series

	pcache, ncache *cache.Cache[*Entry]
	pcap, ncap     int
	pttl, minpttl  time.Duration
	nttl, minnttl  time.Duration
	failttl        time.Duration // SERVFAIL caching; 0 disables it

	prefetch   int // hits needed; 0: no prefetch
	duration   time.Duration
	percentage int

	staleUpTo      time.Duration // serve_stale; 0: off
	verifyStale    bool
	verifyTimeout  time.Duration
	preferPositive bool
	staleTTL       time.Duration
	staleRecheck   time.Duration

	pexcept, nexcept []string // disable success|denial ZONES
	bypass           []string // zones a ZoneBypasser in the block asks never to cache

	keepttl bool

	cfg     *dnsserver.Config // the block, for the fast path; nil outside a server
	metrics *Metrics          // Setup's; a set registered nowhere until then
	// entries are the coredns_cache_entries series the cache inserted under, by server (entriesSeries).
	entries   atomic.Pointer[map[string]*entriesSeries]
	entriesMu sync.Mutex
	clock     atomic.Pointer[func() time.Time] // what now asks; SetClock
}

// New returns a cache with CoreDNS's defaults. Options and Next are set by the parser, or by a test.
func New() *Cache {
	c := &Cache{
		Zones: []string{"."}, zonesLabel: ".",
		pcap: defaultCap, pttl: maxTTL, minpttl: minTTL,
		ncap: defaultCap, nttl: maxNTTL, minnttl: minNTTL,
		failttl: minNTTL, duration: time.Minute, percentage: 10,
		metrics: NewMetrics(nil),
	}
	c.SetClock(time.Now)
	return c
}

// SetClock makes the cache tell the time by now from here on, time.Now until it is called: a test ages its
// entries by stepping a clock instead of waiting for their TTLs. The fast path reads entries on a clock of its
// own (fastpath.Path.SetClock), which must be the same one. It may be called while the cache serves.
func (c *Cache) SetClock(now func() time.Time) { c.clock.Store(&now) }

// now is the cache's time: an entry's age, its prefetch window and its stale window are all measured on it.
func (c *Cache) now() time.Time { return (*c.clock.Load())() }

// build allocates the shards once the capacities are known.
func (c *Cache) build() {
	c.pcache, c.ncache = cache.New[*Entry](c.pcap), cache.New[*Entry](c.ncap)
}

// Name implements plugin.Handler.
func (c *Cache) Name() string { return "cache" }

// Config is the server block the cache was set up in (nil when built outside a server): the fast path reads
// which plugins run before the cache from it.
func (c *Cache) Config() *dnsserver.Config { return c.cfg }

// Key is the cache's key for a question: FNV-1 64 over the DO and CD bits ("1" or "0"), the type and class,
// big-endian, and the lower-cased name. CoreDNS's keys are the same, so both caches shard alike.
func Key(qname string, qtype, qclass uint16, do, cd bool) uint64 {
	h := fnv.New64()
	var b [6]byte
	b[0], b[1] = '0', '0'
	if do {
		b[0] = '1'
	}
	if cd {
		b[1] = '1'
	}
	binary.BigEndian.PutUint16(b[2:], qtype)
	binary.BigEndian.PutUint16(b[4:], qclass)
	h.Write(b[:2])
	h.Write(b[2:])
	h.Write([]byte(qname))
	return h.Sum64()
}

func stateKey(state request.Request) uint64 {
	return Key(state.Name(), state.QType(), state.QClass(), state.Do(), state.Req.CheckingDisabled)
}

// question is req's question, or none: what lookup compares an entry with.
func question(req *dns.Msg) dns.Question {
	if req == nil || len(req.Question) == 0 {
		return dns.Question{}
	}
	return req.Question[0]
}

// usable reports whether an entry with ttl may be served: fresh, or within serve_stale's window.
func (c *Cache) usable(ttl int) bool {
	return ttl > 0 || (c.staleUpTo > 0 && -ttl < int(c.staleUpTo.Seconds()))
}

// lookup is the entry that answers q (keyed k) at now, and its cache type, without counting anything. Under
// prefer_positive an answering positive entry wins; otherwise the denial cache is looked at first, and a
// SERVFAIL there does not shadow a usable positive entry.
func (c *Cache) lookup(k uint64, q dns.Question, now time.Time) (*Entry, string) {
	return c.lookupKnowing(k, q, nil, now)
}

// lookupKnowing is lookup for a caller that knows that entry known answers q (a Hit's entry): known is not
// compared with q again, which is most of a repeated lookup's work. Entries never change their question.
func (c *Cache) lookupKnowing(k uint64, q dns.Question, known *Entry, now time.Time) (*Entry, string) {
	matches := func(e *Entry) bool { return e == known || e.matches(q) }
	if c.preferPositive && c.staleUpTo > 0 {
		if e, ok := c.pcache.Get(k); ok {
			if e = e.answeringEntryBy(matches); e != nil && c.usable(e.TTL(now)) {
				return e, Success
			}
		}
	}
	if e, ok := c.ncache.Get(k); ok && matches(e) && c.usable(e.TTL(now)) {
		if e.rcode == dns.RcodeServerFailure {
			if p, ok := c.pcache.Get(k); ok && matches(p) && c.usable(p.TTL(now)) {
				return p, Success
			}
		}
		return e, Denial
	}
	if e, ok := c.pcache.Get(k); ok && matches(e) && c.usable(e.TTL(now)) {
		return e, Success
	}
	return nil, ""
}

// get is lookup, counted as CoreDNS counts a cache request.
func (c *Cache) get(now time.Time, k uint64, q dns.Question, server string) (*Entry, string) {
	s := c.series(server)
	s.requests.Inc()
	e, typ := c.lookup(k, q, now)
	switch {
	case e == nil:
		c.inc(&s.misses, c.metrics.misses, server)
		return nil, ""
	case typ == Success:
		c.inc(&s.hitsSuccess, c.metrics.hits, server, Success)
	default:
		c.inc(&s.hitsDenial, c.metrics.hits, server, Denial)
	}
	return e, typ
}

// countedSeries are the series a cache request counts into, for one server label. The misses and hits series
// are looked up on first use, as CoreDNS creates them (a series appears when first counted).
type countedSeries struct {
	server                          string
	requests                        prometheus.Counter
	misses, hitsSuccess, hitsDenial atomic.Pointer[prometheus.Counter]
}

// series are the counted series for server: those of the last call when the label is the same (a cache serves
// one block, so it nearly always is). The label lookups (several labels hashed, a lock) were paid twice on
// every query.
func (c *Cache) series(server string) *countedSeries {
	if s := c.counted.Load(); s != nil && s.server == server {
		return s
	}
	s := &countedSeries{server: server, requests: c.metrics.requests.WithLabelValues(server, c.zonesLabel, c.viewLabel)}
	c.counted.Store(s)
	return s
}

// inc increments the series p holds, looking it up in vec first if it holds none: server's, with typ as the
// type label if given.
func (c *Cache) inc(p *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, server string, typ ...string) {
	if o := p.Load(); o != nil {
		(*o).Inc()
		return
	}
	var o prometheus.Counter
	if len(typ) > 0 {
		o = vec.WithLabelValues(server, typ[0], c.zonesLabel, c.viewLabel)
	} else {
		o = vec.WithLabelValues(server, c.zonesLabel, c.viewLabel)
	}
	p.Store(&o)
	o.Inc()
}

// exists is the entry under key k, whatever its state.
func (c *Cache) exists(k uint64) *Entry {
	if e, ok := c.ncache.Get(k); ok {
		return e
	}
	if e, ok := c.pcache.Get(k); ok {
		return e
	}
	return nil
}

// Len is how many entries the success and denial caches hold.
func (c *Cache) Len() (success, denial int) { return c.pcache.Len(), c.ncache.Len() }

// Capacity is the most entries the success and denial caches hold together.
func (c *Cache) Capacity() int { return c.pcap + c.ncap }
