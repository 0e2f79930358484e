package dnscache_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// Where ours differs from CoreDNS's on purpose: a response whose records take more than MaxMsgBytes packed, even
// compressed, is answered but not cached (CoreDNS's would keep it, up to 64 KiB of TCP message, as parsed records).
func TestEntriesAreBounded(t *testing.T) {
	s := build(t, dnscache.Setup(nil), "cache 30", "dns://bounded", map[string]string{
		"fits.example.":  "big 200", // ~3.2 KB compressed, ~5.6 KB not: cached packed compressed
		"large.example.": "big 300", // ~4.8 KB compressed
	})
	for _, tc := range []struct {
		name  string
		calls int
	}{{"fits.example.", 1}, {"large.example.", 2}} {
		before := s.up.count()
		for range 2 {
			if r := s.ask(tc.name, dns.TypeA); len(r.Answer) == 0 {
				t.Fatalf("%s: no answer: %v", tc.name, r)
			}
		}
		if n := s.up.count() - before; n != tc.calls {
			t.Errorf("%s asked twice: %d upstream queries, want %d", tc.name, n, tc.calls)
		}
	}
	if got := dnscache.KeyWorstCaseBytes(false); got < dnscache.MaxMsgBytes {
		t.Errorf("KeyWorstCaseBytes(false) %d < one entry of MaxMsgBytes", got)
	}
	if got := dnscache.KeyWorstCaseBytes(true); got < 2*dnscache.MaxMsgBytes {
		t.Errorf("KeyWorstCaseBytes(true) %d < two entries of MaxMsgBytes (prefer_positive keeps a second answer)", got)
	}
}
