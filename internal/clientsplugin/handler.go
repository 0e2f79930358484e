// Package clientsplugin is the per-client accounting's handler in CoreDNS's chain: first in every block with a
// cache, it counts each answer the chain gives into internal/clients, hit or miss (the cache says which). The
// embedded server (internal/dnsserver) puts it there; a miss the fast path hands CoreDNS runs down through it,
// the cache, fairshare and the forward to upstream, never back into the server.
//
// May touch: nothing.
package clientsplugin

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/addr"
	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// Handler counts what CoreDNS's chain answers into the per-client accounting (internal/clients): the
// fast path's misses, TCP, and every query when the fast path is off. dnsserver's withClients puts it in front of
// every block with a cache, so that it sees each query before any plugin, and learns from the cache
// (dnscache.ReportIn) whether it was a hit. It answers nothing. Its name, clients, is one the fast path lets
// run before the cache (fastpath's preCache): its readers count their hits themselves.
type Handler struct {
	Next plugin.Handler
	// To is the accounting it counts into, once the configuration it belongs to serves; nil counts nothing.
	To *atomic.Pointer[clients.Accounting]
}

func (h *Handler) Name() string { return "clients" }

func (h *Handler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	a := h.To.Load()
	if a == nil {
		return plugin.NextOrFailure(h.Name(), h.Next, ctx, w, r)
	}
	start := time.Now()
	ctx, rep := dnscache.ReportIn(ctx)
	rw := &recorder{ResponseWriter: w, rcode: -1}
	code, err := plugin.NextOrFailure(h.Name(), h.Next, ctx, rw, r)
	rcode := rw.rcode
	if rcode < 0 {
		rcode = code // not written: the server answers with the chain's rcode (plugin.ClientWrite)
	}
	name := ""
	if len(r.Question) > 0 {
		name = strings.ToLower(r.Question[0].Name)
	}
	client, _ := addr.Client(w.RemoteAddr())
	a.Answer(client, name, rcode, rep.Hit != nil, time.Since(start))
	return code, err
}

// recorder keeps the rcode of what the chain wrote.
type recorder struct {
	dns.ResponseWriter
	rcode int
}

func (r *recorder) WriteMsg(m *dns.Msg) error {
	if r.rcode < 0 {
		r.rcode = m.Rcode
	}
	return r.ResponseWriter.WriteMsg(m)
}
