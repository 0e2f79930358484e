package dnscache

import (
	"context"
	"math"
	"time"

	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/chain"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsname"
)

// ServeDNS implements plugin.Handler: answer from the cache, or ask the next plugin and cache its answer.
func (c *Cache) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	// Only QUERY: an UPDATE for a cached name must reach the authoritative plugin.
	if r.Opcode != dns.OpcodeQuery {
		return chain.Next(c.Name(), c.Next, ctx, w, r)
	}
	// r itself is never changed here, and every request passed on is a copy (authenticated, newPrefetchWriter),
	// made only where one is passed on: a miss used to copy the request twice.
	state := request.Request{W: w, Req: r}
	do, cd, ad := state.Do(), r.CheckingDisabled, r.AuthenticatedData
	if !dnsname.AnyUnder(c.Zones, state.Name()) || dnsname.AnyUnder(c.bypass, state.Name()) {
		return chain.Next(c.Name(), c.Next, ctx, w, r.Copy()) // plugins after us must not change r
	}
	now := c.now()
	server := metrics.WithServer(ctx)

	k := stateKey(state)
	e, typ := c.get(now, k, question(r), server)
	if e == nil {
		return c.fetch(ctx, w, r, k, server, do, cd, ad)
	}
	ttl := e.TTL(now)
	stale := ttl <= 0
	if stale {
		if c.verifyStale {
			if served, ret, err := c.verify(ctx, w, r, k, server, e, now, do, cd, ad); served {
				return ret, err
			}
		}
		now = now.Add(time.Duration(ttl) * time.Second) // a reply with TTL 0
		if !c.verifyStale {
			c.tryPrefetch(ctx, e, server, r, k, do, cd, now, true)
		}
		c.metrics.servedStale.WithLabelValues(server, c.zonesLabel, c.viewLabel).Inc()
	} else if c.shouldPrefetch(e, now) {
		c.tryPrefetch(ctx, e, server, r, k, do, cd, now, false)
	}
	if wildcard := e.wildcard(); wildcard != "" {
		metadata.SetValueFunc(ctx, "zone/wildcard", func() string { return wildcard })
	}
	if c.keepttl {
		now = e.storedAt()
	}
	var resp *dns.Msg
	if stale && c.staleTTL > 0 {
		resp = e.toMsgWithTTL(r, uint32(c.staleTTL/time.Second), do, ad) // #nosec G115 -- the parser bounds it
	} else {
		resp = e.toMsg(r, now, do, ad)
		if !stale {
			reportHit(ctx, c, e, typ, server, k, r)
		}
	}
	w.WriteMsg(resp)
	return dns.RcodeSuccess, nil
}

// fetch asks the next plugin and caches what it answers. A next plugin that fails without answering (forward
// when every upstream times out) leaves a SERVFAIL in the cache for the servfail TTL, unless the request was
// cancelled (not an upstream failure).
func (c *Cache) fetch(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, k uint64, server string, do, cd, ad bool) (int, error) {
	req := authenticated(r)
	crr := &ResponseWriter{ResponseWriter: w, Cache: c, req: req, key: k, server: server, do: do, ad: ad, cd: cd,
		ctx: ctx, except: true}
	ret, err := c.next(ctx, req, crr)
	if err != nil && ret == dns.RcodeServerFailure && ctx.Err() == nil && !crr.answered && c.failttl > 0 {
		crr.cacheServerFailure(req)
	}
	return ret, err
}

// verify is serve_stale's verify mode for the request that claims the entry's refresh: ask the next plugin
// first (for at most VERIFY_TIMEOUT, if set) and answer with what refreshed the entry; served is false when
// the stale entry is to be served instead.
func (c *Cache) verify(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, k uint64, server string,
	e *Entry, now time.Time, do, cd, ad bool) (served bool, ret int, err error) {
	recheck := c.staleRecheck
	track := recheck > 0 || c.verifyTimeout > 0
	if track && !e.beginRefresh(now, recheck) {
		return false, 0, nil
	}
	req := authenticated(r)
	crr := &ResponseWriter{ResponseWriter: w, Cache: c, req: req, key: k, server: server, do: do, ad: ad, cd: cd, keepLast: true}
	if c.verifyTimeout > 0 {
		crr.prefetch = true // cached, not written: the client may get the stale entry meanwhile
	}
	vw := &verifyWriter{ResponseWriter: crr}
	if c.verifyTimeout == 0 {
		ret, err := c.next(ctx, req, vw)
		if track {
			e.endRefresh(c.now(), recheck, vw.refreshed)
		}
		return vw.refreshed, ret, err
	}
	return c.verifyWithTimeout(ctx, w, r, req, vw, e, do, ad, recheck)
}

// verifyWithTimeout races the refresh against VERIFY_TIMEOUT; the refresh goes on in the background if it
// loses, and updates the cache when it succeeds.
func (c *Cache) verifyWithTimeout(ctx context.Context, w dns.ResponseWriter, r, req *dns.Msg,
	vw *verifyWriter, e *Entry, do, ad bool, recheck time.Duration) (bool, int, error) {
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	rctx := metadata.ContextWithMetadata(ctx)
	for label, f := range metadata.ValueFuncs(ctx) {
		metadata.SetValueFunc(rctx, label, f)
	}
	go func() {
		code, err := c.next(rctx, req, vw)
		e.endRefresh(c.now(), recheck, vw.refreshed)
		done <- result{code, err}
	}()
	timer := time.NewTimer(c.verifyTimeout)
	defer timer.Stop()
	select {
	case res := <-done:
		if !vw.refreshed {
			return false, 0, nil
		}
		if vw.response == nil {
			return true, res.code, res.err
		}
		resp := vw.response
		if vw.entry != nil {
			now := c.now()
			if c.keepttl {
				now = vw.entry.storedAt()
			}
			resp = vw.entry.toMsg(r, now, do, ad)
		}
		if err := w.WriteMsg(resp); err != nil {
			return true, dns.RcodeServerFailure, err
		}
		return true, dns.RcodeSuccess, nil
	case <-timer.C:
		return false, 0, nil
	}
}

// shouldPrefetch counts a fresh hit and reports whether it makes the entry due for a prefetch: popular
// (AMOUNT hits without a gap of DURATION) and within PERCENTAGE of its TTL of expiring.
func (c *Cache) shouldPrefetch(e *Entry, now time.Time) bool {
	if c.prefetch <= 0 {
		return false
	}
	hits := e.freq.update(c.duration, now)
	return c.prefetchDue(e, hits, now)
}

func (c *Cache) prefetchDue(e *Entry, hits int, now time.Time) bool {
	threshold := int(math.Ceil(float64(c.percentage) / 100 * float64(e.origTTL)))
	return hits >= c.prefetch && e.TTL(now) <= threshold
}

// tryPrefetch refreshes e in the background unless a refresh is already in flight (or, for a stale entry,
// held off after a failure): prefetches scale with distinct keys, not with the query rate.
func (c *Cache) tryPrefetch(ctx context.Context, e *Entry, server string, req *dns.Msg, k uint64, do, cd bool, now time.Time, stale bool) {
	recheck := time.Duration(0)
	if stale {
		recheck = c.staleRecheck
	}
	if !e.beginRefresh(c.now(), recheck) {
		return
	}
	cw := newPrefetchWriter(server, req, k, do, cd, c)
	go func() {
		refreshed := c.doPrefetch(ctx, cw, e, now, stale)
		e.endRefresh(c.now(), recheck, refreshed)
	}()
}

func (c *Cache) doPrefetch(ctx context.Context, cw *ResponseWriter, e *Entry, now time.Time, stale bool) bool {
	ctx = metadata.ContextWithMetadata(ctx) // the request's map is not ours to write concurrently
	c.metrics.prefetches.WithLabelValues(cw.server, c.zonesLabel, c.viewLabel).Inc()
	if stale {
		cw.keepLast = true
		vw := &verifyWriter{ResponseWriter: cw}
		c.next(ctx, cw.req, vw)
		if !vw.refreshed {
			return false
		}
	} else {
		c.next(ctx, cw.req, cw)
	}
	// The new entry inherits the hits counted so far, so a popular name stays popular.
	if e1 := c.exists(cw.key); e1 != nil {
		e1.freq.reset(now, e.freq.count())
	}
	return true
}

func (c *Cache) next(ctx context.Context, req *dns.Msg, w dns.ResponseWriter) (int, error) {
	return chain.Next(c.Name(), c.Next, ctx, w, req)
}

// authenticated is a copy of r that sets AD: upstreams then say whether they validated.
func authenticated(r *dns.Msg) *dns.Msg {
	r = r.Copy()
	r.AuthenticatedData = true
	return r
}

// wildcardOf is the wildcard the plugin that answered a request under ctx matched, if it said (metadata
// zone/wildcard).
func wildcardOf(ctx context.Context) string {
	if f := metadata.ValueFunc(ctx, "zone/wildcard"); f != nil {
		return f()
	}
	return ""
}
