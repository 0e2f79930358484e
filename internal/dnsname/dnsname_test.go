package dnsname

import (
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
)

var pairs = [][2]string{
	{".", "example.org."}, {".", "."}, {".", ""},
	{"cluster.local.", "cluster.local."}, {"cluster.local.", "a.b.cluster.local."}, {"cluster.local.", "Cluster.LOCAL."},
	{"cluster.local.", "xcluster.local."}, {"cluster.local.", "local."}, {"cluster.local.", "."},
	{"cluster.local.", "a.cluster.local"}, {"cluster.local", "a.cluster.local"}, {"cluster.local", "a.cluster.local."},
	{"local.", `a\.local.`}, {"local.", `a\\.local.`}, {"cluster.local.", `x\.cluster.local.`},
	{"cluster.local.", "a..cluster.local."}, {"cluster.local.", ".cluster.local."}, {"in-addr.arpa.", "10.in-addr.arpa."},
	{"ip6.arpa.", "ip6.arpa."}, {"example.org.", "example.org.example.org."}, {"k.", "\u212a."}, {"é.", "É."},
}

// TestUnderAsMiekg: Under and the two Zones helpers answer as miekg/dns and CoreDNS do on the cases that
// matter (the root, case, label boundaries, fully qualified or not, escapes, empty labels).
func TestUnderAsMiekg(t *testing.T) {
	for _, p := range pairs {
		zone, name := p[0], p[1]
		if want, ok := miekg(zone, name); ok && Under(zone, name) != want {
			t.Errorf("Under(%q, %q) = %v, dns.IsSubDomain says %v", zone, name, !want, want)
		}
	}
	zones := []string{"local.", "cluster.local.", "."}
	for _, p := range pairs {
		name := p[1]
		if _, ok := miekg(".", name); !ok {
			continue
		}
		if got, want := Longest(zones, name), plugin.Zones(zones).Matches(name); got != want {
			t.Errorf("Longest(%q) = %q, plugin.Zones.Matches says %q", name, got, want)
		}
		if got, want := AnyUnder(zones[:2], name), plugin.Zones(zones[:2]).Contains(name); got != want {
			t.Errorf("AnyUnder(%q) = %v, plugin.Zones.Contains says %v", name, got, want)
		}
	}
}

// TestUnderAllocatesNothing: a plain name's check allocates nothing (IsSubDomain allocates two label slices).
func TestUnderAllocatesNothing(t *testing.T) {
	zones := []string{"cluster.local.", "in-addr.arpa.", "."}
	if n := testing.AllocsPerRun(100, func() { _ = Longest(zones, "svc-1.ns.svc.cluster.local.") }); n != 0 {
		t.Errorf("Longest allocates %v times per call", n)
	}
}

// FuzzUnderAsMiekg: for any two strings Under answers as dns.IsSubDomain (where that does not panic).
func FuzzUnderAsMiekg(f *testing.F) {
	for _, p := range pairs {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, zone, name string) {
		want, ok := miekg(zone, name)
		if !ok {
			return
		}
		if got := Under(zone, name); got != want {
			t.Fatalf("Under(%q, %q) = %v, dns.IsSubDomain says %v", zone, name, got, want)
		}
	})
}

// miekg is dns.IsSubDomain(zone, name); ok is false where it panics (an empty name under a zone that is not
// the root): no query's name is empty.
func miekg(zone, name string) (sub, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return dns.IsSubDomain(zone, name), true
}
