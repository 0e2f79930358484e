package supervisor

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// fakeFallbackTable is the kernel's one unowned fallback table, which anybody may change: it holds the
// listing of what was applied ("" when there is no table), and counts writes.
type fakeFallbackTable struct {
	listing string
	writes  int
	stopped bool // StopFallback ran since the table was last written
	// deletedLive counts deletions of a table still redirecting: the queries it redirected last lose their
	// replies' rewrite (removeFallback must stop it first).
	deletedLive int
}

func (k *fakeFallbackTable) ApplyFallback(f *nft.Fallback) error {
	k.listing, k.stopped = f.String(), false
	k.writes++
	return nil
}

func (k *fakeFallbackTable) FallbackInSync(f *nft.Fallback) (bool, error) {
	return k.listing == f.String(), nil
}

// StopFallback empties the rewrite chains: the fake keeps a stopped table's listing, marked.
func (k *fakeFallbackTable) StopFallback() (bool, error) {
	if k.listing == "" {
		return false, nil
	}
	k.stopped = true
	return true, nil
}

func (k *fakeFallbackTable) DeleteFallback() (bool, error) {
	had := k.listing != ""
	if had && !k.stopped {
		k.deletedLive++
	}
	k.stopped = false
	if had {
		k.writes++
	}
	k.listing = ""
	return had, nil
}

func newTestFallback(t *testing.T, k *fakeFallbackTable, enabled bool, upstream string) (*fallback, *metrics.Metrics) {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &options.Options{SetupNftables: true, LinkLocalFallback: enabled, DNSPort: 53}
	return newFallback(zaptest.NewLogger(t), m, k, o, "KUBE_DNS_UPSTREAM_SERVICE_HOST", upstream), m
}

func failOpenLinkLocal(m *metrics.Metrics) float64 {
	var out dto.Metric
	if err := m.FailOpen.WithLabelValues("link-local").Write(&out); err != nil {
		return -1
	}
	return out.GetGauge().GetValue()
}

// TestFallbackKeepsTheUnion: the table covers the union it is given, is written only when it differs from
// what the kernel holds (so two instances computing the same union never fight), and comes back after
// anybody else changed or deleted it.
func TestFallbackKeepsTheUnion(t *testing.T) {
	k := &fakeFallbackTable{}
	f, m := newTestFallback(t, k, true, "10.96.0.11")
	step := func(what string, ips []netip.Addr, wantWrite bool) {
		t.Helper()
		before := k.writes
		changed, err := f.ensure(ips)
		if err != nil {
			t.Fatalf("%s: ensure: %v", what, err)
		}
		if wrote := k.writes > before; wrote != wantWrite || (changed != "") != wantWrite {
			t.Errorf("%s: wrote %v (change %q), want a write: %v", what, wrote, changed, wantWrite)
		}
	}
	step("first pass", addrs("169.254.20.10", "10.96.0.10"), true)
	if !strings.Contains(k.listing, "ip daddr 169.254.20.10 udp dport 53 meta mark & 0x00000070 != 0x00000070 counter") || !strings.Contains(k.listing, "ip daddr set 10.96.0.11") {
		t.Fatalf("the table does not rewrite the link-local address to the upstream:\n%s", k.listing)
	}
	if v := failOpenLinkLocal(m); v != 1 {
		t.Errorf("fail_open{path=link-local} = %v, want 1", v)
	}
	step("same union, another order", addrs("10.96.0.10", "169.254.20.10", "10.96.0.10"), false)
	step("a surge adds an address", addrs("169.254.20.10", "10.96.0.10", "169.254.20.11"), true)
	if !strings.Contains(k.listing, "ip daddr 169.254.20.11") {
		t.Errorf("the added address is not covered:\n%s", k.listing)
	}
	k.listing = "" // nft flush ruleset
	step("after a flush", addrs("169.254.20.10", "10.96.0.10", "169.254.20.11"), true)
	k.listing = strings.Replace(k.listing, "10.96.0.11", "10.96.0.99", 1) // someone edits a rule
	step("after an edit", addrs("169.254.20.10", "10.96.0.10", "169.254.20.11"), true)
	step("an IPv6 address beside an IPv4 upstream", addrs("169.254.20.10", "fd00::a"), true)
	if v := failOpenLinkLocal(m); v != 0 {
		t.Errorf("with an uncovered local IP, fail_open{path=link-local} = %v, want 0", v)
	}
}

// TestFallbackDisabled: without a usable upstream there is no table and the metric says so; switched off by
// the operator, a table an earlier run left is deleted, once.
func TestFallbackDisabled(t *testing.T) {
	for _, tc := range []struct {
		name, upstream, reason string
	}{
		{"no upstream variable", "", "KUBE_DNS_UPSTREAM_SERVICE_HOST is not set"},
		{"not an address", "kube-dns-upstream", "is not an IP address"},
		{"IPv6 upstream", "fd00:96::b", "IPv4 upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &fakeFallbackTable{}
			f, m := newTestFallback(t, k, true, tc.upstream)
			if !strings.Contains(f.disabled, tc.reason) {
				t.Errorf("disabled because %q, want it to say %q", f.disabled, tc.reason)
			}
			if _, err := f.ensure(addrs("169.254.20.10")); err != nil || k.writes != 0 {
				t.Errorf("ensure = %v with %d writes, want nil and none", err, k.writes)
			}
			if v := failOpenLinkLocal(m); v != 0 {
				t.Errorf("fail_open{path=link-local} = %v, want 0", v)
			}
		})
	}
	k := &fakeFallbackTable{listing: "table inet nodelocaldns-fallback {...}"}
	f, _ := newTestFallback(t, k, false, "10.96.0.11")
	if changed, err := f.ensure(addrs("169.254.20.10")); err != nil || changed == "" || k.listing != "" || k.deletedLive != 0 {
		t.Fatalf("-linklocal-fallback=false: ensure = %q, %v, table %q, %d deleted while redirecting; want the table stopped, then deleted",
			changed, err, k.listing, k.deletedLive)
	}
	k.listing = "re-created by an instance of another configuration"
	if _, err := f.ensure(addrs("169.254.20.10")); err != nil || k.listing == "" {
		t.Errorf("deleted again on a later pass (%v): instances of other configurations would fight", err)
	}
}
