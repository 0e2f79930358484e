package dnscache

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/plugin/pkg/response"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/chain"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsname"
)

var _ chain.OwnedWriter = (*ResponseWriter)(nil)

// ResponseWriter caches what the next plugin answers, then writes it to the client (unless it is a
// prefetch's, which has no client).
type ResponseWriter struct {
	dns.ResponseWriter
	*Cache
	// The request passed on (the client's, copied to set AD) and its key (Key, with do and cd), which ServeDNS
	// has hashed already. They replace a request.Request (128 bytes): the writer, allocated per miss, took 240.
	req    *dns.Msg
	key    uint64
	server string

	do, cd, ad bool
	prefetch   bool // cache only, write nothing
	remoteAddr net.Addr

	// ctx is the client's request's, whose metadata names the wildcard an answer matched; nil for a prefetch.
	// (A context, not a closure over it: that was an allocation per miss.)
	ctx context.Context
	// except says the disable lists (the Cache's pexcept, nexcept) apply: they do to what a client's miss
	// fetches; refreshes (prefetch, verify) cache regardless, as in CoreDNS. (A flag, not the lists: the
	// writer is allocated per miss, and the two slice headers took it a size class up.)
	except bool

	answered     bool     // a reply was written
	keepLast     bool     // keep a copy of the last reply (lastResponse), for a verifyWriter
	lastResponse *dns.Msg // the last reply, after the TTL cap and the AD rule, if keepLast
	lastEntry    *Entry   // the entry the last reply was stored as, if it was
}

// prefetchAddr is a prefetch's remote address: TCP, so the next plugin's answer is not truncated.
var prefetchAddr = &net.TCPAddr{}

func newPrefetchWriter(server string, req *dns.Msg, k uint64, do, cd bool, c *Cache) *ResponseWriter {
	return &ResponseWriter{Cache: c, server: server, do: do, cd: cd, ad: true, prefetch: true,
		remoteAddr: prefetchAddr, req: authenticated(req), key: k}
}

// matches reports whether res answers the request (request.Request's Match: a response to its name and type).
func (w *ResponseWriter) matches(res *dns.Msg) bool {
	state := request.Request{Req: w.req}
	return state.Match(res)
}

// RemoteAddr, LocalAddr, Close, TsigStatus, TsigTimersOnly and Hijack work without a client (a prefetch's).
func (w *ResponseWriter) RemoteAddr() net.Addr {
	if w.remoteAddr != nil {
		return w.remoteAddr
	}
	return w.ResponseWriter.RemoteAddr()
}

func (w *ResponseWriter) LocalAddr() net.Addr {
	if w.ResponseWriter == nil {
		return prefetchAddr
	}
	return w.ResponseWriter.LocalAddr()
}

func (w *ResponseWriter) Close() error {
	if w.ResponseWriter == nil {
		return nil
	}
	return w.ResponseWriter.Close()
}

func (w *ResponseWriter) TsigStatus() error {
	if w.ResponseWriter == nil {
		return nil
	}
	return w.ResponseWriter.TsigStatus()
}

func (w *ResponseWriter) TsigTimersOnly(b bool) {
	if w.ResponseWriter != nil {
		w.ResponseWriter.TsigTimersOnly(b)
	}
}

func (w *ResponseWriter) Hijack() {
	if w.ResponseWriter != nil {
		w.ResponseWriter.Hijack()
	}
}

// WriteMsg caps the reply's TTLs to what it is cached for (so a client never sees 1799 then 8), caches it,
// and writes it. It works on a copy: res may be another plugin's to keep (stored records).
func (w *ResponseWriter) WriteMsg(res *dns.Msg) error {
	if res == nil {
		return errors.New("cache: response message is nil")
	}
	return w.WriteOwnedMsg(res.Copy())
}

// WriteOwnedMsg is WriteMsg on a message handed over (chain.OwnedWriter): our forward's answer, unpacked for this
// query alone, is changed in place instead of copied.
func (w *ResponseWriter) WriteOwnedMsg(res *dns.Msg) error {
	if res == nil {
		return errors.New("cache: response message is nil")
	}
	w.lastEntry = nil
	now := w.now()
	mt := responseType(res, now.UTC())
	d := w.duration(res, mt)
	ttl := uint32(d.Seconds())
	res.Answer, res.Ns, res.Extra = capTTL(res.Answer, ttl), capTTL(res.Ns, ttl), capTTL(res.Extra, ttl)

	if cacheable(res, mt) && d > 0 {
		if w.matches(res) {
			w.set(res, w.key, mt, d, now)
			w.metrics.entries.inserted(w.Cache, w.server)
		} else {
			w.metrics.drops.WithLabelValues(w.server, w.zonesLabel, w.viewLabel).Inc()
		}
	}
	if !w.do && !w.ad {
		res.AuthenticatedData = false // RFC 6840 5.7-5.8: AD only for who asked for DNSSEC or set AD
	}
	w.answered = true
	if w.keepLast {
		w.lastResponse = res.Copy()
	}
	if w.prefetch {
		return nil
	}
	return w.ResponseWriter.WriteMsg(res)
}

// duration is how long res is cached: its smallest TTL within the type's bounds, or the servfail TTL.
func (w *ResponseWriter) duration(res *dns.Msg, mt response.Type) time.Duration {
	switch mt {
	case response.NameError, response.NoData:
		return min(max(dnsutil.MinimalTTLWithMaximum(res, mt, w.nttl), w.minnttl), w.nttl)
	case response.ServerError:
		return w.failttl
	}
	return min(max(dnsutil.MinimalTTLWithMaximum(res, mt, w.pttl), w.minpttl), w.pttl)
}

// capTTL drops OPT records (hop by hop) and sets every other record's TTL.
func capTTL(rrs []dns.RR, ttl uint32) []dns.RR {
	out := withoutOPT(rrs)
	for _, r := range out {
		r.Header().Ttl = ttl
	}
	return out
}

// cacheServerFailure caches a SERVFAIL for req without writing it: the next plugin failed without answering.
func (w *ResponseWriter) cacheServerFailure(req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetRcode(req, dns.RcodeServerFailure)
	w.prefetch = true
	_ = w.WriteMsg(resp)
}

// set stores m under key, unless its zone is disabled for its type or it is too large to be cached.
func (w *ResponseWriter) set(m *dns.Msg, key uint64, mt response.Type, d time.Duration, now time.Time) {
	switch mt {
	case response.NoError, response.Delegation:
		if w.except && dnsname.AnyUnder(w.pexcept, m.Question[0].Name) {
			return
		}
		e := w.entry(m, d, now)
		if e == nil {
			return
		}
		if w.preferPositive && !e.answering {
			// A non-answer does not destroy the last answer known good.
			if prev, ok := w.pcache.Get(key); ok {
				if good := prev.answeringEntry(question(w.req)); good != nil {
					e = e.withLastKnownGood(good)
				}
			}
		}
		if w.pcache.Add(key, e) {
			w.metrics.evictions.WithLabelValues(w.server, Success, w.zonesLabel, w.viewLabel).Inc()
		}
		w.lastEntry = e
		// A positive refresh is the newest state of the key; under prefer_positive only an answer clears the
		// denial.
		if (!w.preferPositive && w.prefetch) || (w.preferPositive && e.answering) {
			w.ncache.Remove(key)
		}
	case response.NameError, response.NoData, response.ServerError:
		if w.except && dnsname.AnyUnder(w.nexcept, m.Question[0].Name) {
			return
		}
		e := w.entry(m, d, now)
		if e == nil {
			return
		}
		if w.ncache.Add(key, e) {
			w.metrics.evictions.WithLabelValues(w.server, Denial, w.zonesLabel, w.viewLabel).Inc()
		}
		w.lastEntry = e
	}
}

func (w *ResponseWriter) entry(m *dns.Msg, d time.Duration, now time.Time) *Entry {
	var wildcard string
	if w.ctx != nil {
		wildcard = wildcardOf(w.ctx)
	}
	return newEntry(m, now, d, wildcard)
}

// Write is not used by plugins that answer with messages; CoreDNS's cache passes it on uncached.
func (w *ResponseWriter) Write(buf []byte) (int, error) {
	if w.prefetch {
		return 0, nil
	}
	return w.ResponseWriter.Write(buf)
}

// verifyWriter passes on only responses that refresh a stale entry (RFC 8767 section 4: a matching, complete
// NOERROR or NXDOMAIN; under prefer_positive a usable positive answer, the rest being cached unsent).
type verifyWriter struct {
	*ResponseWriter
	refreshed bool
	response  *dns.Msg
	entry     *Entry
}

func (w *verifyWriter) WriteMsg(res *dns.Msg) error {
	w.refreshed, w.response, w.entry = false, nil, nil
	if res == nil || res.Truncated || !w.matches(res) {
		return nil
	}
	if w.preferPositive {
		if usableAnswer(res, w.now().UTC()) {
			return w.pass(res)
		}
		prefetch := w.prefetch
		w.prefetch = true
		err := w.ResponseWriter.WriteMsg(res)
		w.prefetch = prefetch
		return err
	}
	t, _ := response.Typify(res, w.now().UTC())
	if t == response.OtherError || t == response.Meta || t == response.Update {
		return nil
	}
	if res.Rcode != dns.RcodeSuccess && res.Rcode != dns.RcodeNameError {
		return nil
	}
	return w.pass(res)
}

func (w *verifyWriter) pass(res *dns.Msg) error {
	w.refreshed = true
	err := w.ResponseWriter.WriteMsg(res)
	w.response, w.entry = w.lastResponse, w.lastEntry
	return err
}
