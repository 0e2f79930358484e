package nftconn

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Conventions: 169.254.20.10 is the link-local listen IP, 10.96.0.10 the kube-dns ClusterIP, fd00::/8 and
// 2001:db8::/32 stand in for IPv6 listen IPs.
//
// The specs of nft's golden files (internal/nft/testdata, pinned there by ruleset_test.go and
// fallback_test.go): the kernel tests here apply each and compare nft's listing with the same file, so a spec
// that drifts from its file's fails here too.

// goldenCases are the specs of the instance tables' golden files, by name.
var goldenCases = []struct {
	name string
	spec nft.Spec
}{
	// An instance that wants the link-local fallback says towards which kube-dns ClusterIP (set fallback4).
	{"ipv4", nft.Spec{LocalIPs: ips("169.254.20.10"), DNSPort: 53, HealthPort: 8080, Fallbacks: []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53")}}},
	{"ipv6", nft.Spec{LocalIPs: ips("fd00::a"), DNSPort: 53, HealthPort: 8080}},
	{"dual-stack", nft.Spec{LocalIPs: ips("169.254.20.10", "fd00::a"), DNSPort: 53, HealthPort: 8080}},
	{"several-ips", nft.Spec{
		LocalIPs:   ips("169.254.20.10", "10.96.0.10", "9.9.9.9", "fd00::a", "2001:db8::53", "fd00::10"),
		DNSPort:    53,
		HealthPort: 8080,
	}},
	{"custom-ports", nft.Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 5353, HealthPort: 8081}},
	// The fallback for a kernel without nft_socket, and -setupiptables=false (sets and a marker chain).
	{"ungated", nft.Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, Ungated: true}},
	// Both: without nft_socket the prerouting rules follow the bound addresses too.
	{"ungated-partial-bind", nft.Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, Ungated: true, Unbound: ips("10.96.0.10")}},
	// A foreign drop covers the ClusterIP (supervisor/foreign.go): its queries are left to kube-dns.
	{"step-aside", nft.Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10", "fd00::a"), DNSPort: 53, HealthPort: 8080, StepAside: ips("10.96.0.10")}},
	{"no-interception", nft.Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, NoInterception: true}},
	// A Corefile whose bind leaves the ClusterIP out: host-network clients' rules match the bound sets.
	{"partial-bind", nft.Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, Unbound: ips("10.96.0.10")}},
}

func ips(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// fallbackCases are the specs of the fallback table's golden files, by name.
var fallbackCases = []struct {
	name string
	spec nft.FallbackSpec
}{
	{"fallback-ipv4", nft.FallbackSpec{Targets: addrs("10.96.0.10"), Covered: pairs("169.254.20.10:53"), Lease: 15 * time.Minute}},
	// Two instances' addresses on two ports, an IPv6 local IP the IPv4 ClusterIP cannot serve, and the
	// ClusterIP itself, which fails open through kube-proxy.
	{"fallback-mixed", nft.FallbackSpec{
		Targets: addrs("10.96.0.10"),
		Covered: pairs("169.254.20.11:53", "[fd00::a]:53", "169.254.20.10:5353", "10.96.0.10:53", "169.254.20.11:53"),
		Lease:   90 * time.Second,
	}},
	// An IPv6-only cluster: the local address and the ClusterIP are IPv6.
	{"fallback-ipv6", nft.FallbackSpec{Targets: addrs("fd00:96::a"), Covered: pairs("[fd00::10]:53", "[fd00:96::a]:53"), Lease: 15 * time.Minute}},
	// Dual-stack: a ClusterIP of each family, each family's local IPs towards its own.
	{"fallback-dual-stack", nft.FallbackSpec{
		Targets: addrs("fd00:96::a", "10.96.0.10"),
		Covered: pairs("169.254.20.10:53", "[fd00::10]:53"),
		Lease:   15 * time.Minute,
	}},
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func pairs(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

// readGolden reads one of nft's golden files.
func readGolden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name+".nft"))
	if err != nil {
		t.Fatalf("read golden file (regenerate with `go test ./internal/nft -update`): %v", err)
	}
	return string(b)
}
