package dnscache

import (
	"context"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// The fast path's API. A caller that wants to know whether a request was answered from the cache passes a
// context from WithReport; when ServeDNS answers it with a fresh entry, the report holds a Hit. The caller
// may then answer identical requests itself for as long as Hit.Serve says so: Serve does what ServeDNS would
// do for the same request (count it, age it, count it towards a prefetch) when that is all ServeDNS would do,
// and refuses otherwise (the entry was replaced, evicted, shadowed, expired, or the hit would start a
// prefetch), so that those requests go through ServeDNS.

type reportKey struct{}

// Report is where ServeDNS leaves the Hit that answered a request.
type Report struct{ Hit *Hit }

// WithReport returns ctx carrying a Report for the request served with it.
func WithReport(ctx context.Context) (context.Context, *Report) {
	r := &Report{}
	return context.WithValue(ctx, reportKey{}, r), r
}

func reportHit(ctx context.Context, c *Cache, e *Entry, typ, server string, k uint64, req *dns.Msg) {
	r, ok := ctx.Value(reportKey{}).(*Report)
	if !ok {
		return
	}
	h := &Hit{
		Cache: c, entry: e, typ: typ, key: k, q: question(req),
		requests: c.metrics.requests.WithLabelValues(server, c.zonesLabel, c.viewLabel),
		hits:     c.metrics.hits.WithLabelValues(server, typ, c.zonesLabel, c.viewLabel),
	}
	r.Hit = h
}

// Hit is a fresh answer ServeDNS gave from an entry, with the counters a repeat of it counts into.
type Hit struct {
	Cache          *Cache
	entry          *Entry
	typ            string
	key            uint64
	q              dns.Question // what the entry answers; kept alone (not the request) to keep a Hit small
	requests, hits prometheus.Counter
}

// Type is the cache the entry is in: Success or Denial.
func (h *Hit) Type() string { return h.typ }

// Serve counts a repeat of the request at now as ServeDNS would and returns the TTL its answer carries, if a
// repeat would be answered from the same entry, fresh, without starting a prefetch. It returns false, having
// counted nothing, otherwise: the request is then ServeDNS's.
func (h *Hit) Serve(now time.Time) (uint32, bool) {
	c, e := h.Cache, h.entry
	if cur, typ := c.lookupKnowing(h.key, h.q, e, now); cur != e || typ != h.typ {
		return 0, false
	}
	ttl := e.TTL(now)
	if ttl <= 0 {
		return 0, false // stale: ServeDNS serves it and refreshes
	}
	if c.prefetch > 0 && !e.freq.hitUnlessDue(c.duration, now, func(hits int) bool { return c.prefetchDue(e, hits, now) }) {
		return 0, false
	}
	h.requests.Inc()
	h.hits.Inc()
	if c.keepttl {
		return e.origTTL, true
	}
	return uint32(ttl), true
}

// Valid reports whether the entry is still the one a request would be answered from at now, fresh; it
// counts nothing (the fast path sweeps with it).
func (h *Hit) Valid(now time.Time) bool {
	cur, typ := h.Cache.lookupKnowing(h.key, h.q, h.entry, now)
	return cur == h.entry && typ == h.typ && h.entry.TTL(now) > 0
}

// hitUnlessDue counts a hit at now unless the count would make due() true; it reports whether it counted.
func (f *freq) hitUnlessDue(d time.Duration, now time.Time, due func(int) bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	hits := f.next(d, now)
	if due(hits) {
		return false
	}
	f.hits, f.last = hits, since(now)
	return true
}

// ReportIn returns ctx and the Report it carries (the fast path's, for a query it handed to CoreDNS), or ctx
// with a new one: a handler in front of the cache learns whether the cache answered without hiding that from
// a caller who asked first.
func ReportIn(ctx context.Context) (context.Context, *Report) {
	if r, ok := ctx.Value(reportKey{}).(*Report); ok {
		return ctx, r
	}
	return WithReport(ctx)
}
