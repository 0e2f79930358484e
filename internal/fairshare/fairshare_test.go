package fairshare

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
)

// remote is a ResponseWriter that says only where its query came from.
type remote struct {
	dns.ResponseWriter
	addr net.Addr
}

func (r remote) RemoteAddr() net.Addr { return r.addr }

// sourceOf reads the address from the writer's net.Addr as request.Request.IP does from its string: IPv4-mapped
// addresses as IPv4, a zone kept, TCP as UDP, any other net.Addr by its string; no address is the zero Addr.
func TestSourceOf(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want netip.Addr
	}{
		{&net.UDPAddr{IP: net.ParseIP("10.244.1.7"), Port: 40000}, ip("10.244.1.7")},
		{&net.UDPAddr{IP: net.ParseIP("::ffff:10.244.1.7"), Port: 40000}, ip("10.244.1.7")},
		{&net.TCPAddr{IP: net.ParseIP("fd00::7"), Port: 40000}, ip("fd00::7")},
		{&net.UDPAddr{IP: net.ParseIP("fe80::1"), Port: 40000, Zone: "eth0"}, ip("fe80::1%eth0")},
		{&net.IPAddr{IP: net.ParseIP("192.0.2.9")}, ip("192.0.2.9")},
		{&net.UnixAddr{Name: "/run/dns.sock", Net: "unix"}, netip.Addr{}},
		{nil, netip.Addr{}},
	} {
		if got := sourceOf(remote{addr: c.addr}); got != c.want {
			t.Errorf("sourceOf(%v) = %v, want %v", c.addr, got, c.want)
		}
	}
	// The zero Addr is a group of its own, apart from every address's; a zone does not split a prefix.
	if p := prefixOf(netip.Addr{}); p.IsValid() || p == prefixOf(ip("0.0.0.1")) {
		t.Errorf("prefixOf(zero) = %v", p)
	}
	if p := prefixOf(ip("fe80::1%eth0")); p != netip.MustParsePrefix("fe80::/64") {
		t.Errorf("prefixOf(fe80::1%%eth0) = %v, want fe80::/64", p)
	}
}

// BenchmarkFair is one query through the directive from a lone client, the next handler answering at once:
// what the directive adds to a miss.
func BenchmarkFair(b *testing.B) {
	f := &Fair{lim: newLimiter(100, MaxWait), refused: NewMetrics(nil).refused,
		Next: plugin.HandlerFunc(func(context.Context, dns.ResponseWriter, *dns.Msg) (int, error) { return 0, nil })}
	w := &remote{addr: &net.UDPAddr{IP: net.ParseIP("10.244.1.7"), Port: 40000}}
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeA)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		f.ServeDNS(ctx, w, m)
	}
}
