package fastpath_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// A panic in the fast path's reader (injected into its hit path for queries naming "boom") is counted, the
// query that caused it is answered by CoreDNS, and every query after it is still answered, hits included.
func TestPanicIsContained(t *testing.T) {
	up, p, addr := startLearnt(t, "ok.example.", func(next fastpath.HitFunc) fastpath.HitFunc {
		return func(q []byte, from netip.AddrPort, out []byte, now time.Time) ([]byte, *fastpath.Entry) {
			if strings.Contains(string(q), "boom") {
				panic("injected")
			}
			return next(q, from, out, now)
		}
	})
	for i := range 3 {
		if r := ask(t, addr, "boom.example."); len(r.Answer) != 1 {
			t.Fatalf("query %d that panicked in the fast path: %v, want CoreDNS's answer", i, r)
		}
	}
	if got := p.Metrics().Panics(); got != 3 {
		t.Errorf("nodelocaldns_fastpath_panics_total is %v, want 3", got)
	}
	for range 5 {
		if r := ask(t, addr, "ok.example."); len(r.Answer) != 1 {
			t.Fatalf("after the panics: %v", r)
		}
	}
	if n := up.QueriesFor("ok.example."); n != 1 {
		t.Errorf("upstream saw %d queries for ok.example., want 1: hits are still the fast path's", n)
	}
}

// startLearnt starts CoreDNS with a fast path that has learnt name's answer, and wraps its hit path with wrap.
func startLearnt(t *testing.T, name string, wrap func(fastpath.HitFunc) fastpath.HitFunc) (*testenv.Upstream, *fastpath.Path, netip.AddrPort) {
	t.Helper()
	up := startUpstream(t)
	p, addr := startCoreDNS(t, "cache 30\n forward . "+up.Addr)
	for range 3 { // a miss, then two answers from the cache: learned
		ask(t, addr, name)
	}
	waitAnswerable(t, p, addr, name)
	if !p.WrapHit(addr, wrap) {
		t.Fatal("no fast-path listener on", addr)
	}
	return up, p, addr
}
