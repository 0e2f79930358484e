package nft

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Conventions: 169.254.20.10 is the link-local listen IP, 10.96.0.10 the kube-dns ClusterIP, fd00::/8 and
// 2001:db8::/32 stand in for IPv6 listen IPs. Golden files live in testdata/ beside this file.

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenCases is shared with the kernel tests, which load the same files and compare the kernel's listing.
var goldenCases = []struct {
	name string
	spec Spec
}{
	// An instance that wants the link-local fallback says towards which kube-dns ClusterIP (set fallback4).
	{"ipv4", Spec{LocalIPs: ips("169.254.20.10"), DNSPort: 53, HealthPort: 8080, Fallbacks: []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53")}}},
	{"ipv6", Spec{LocalIPs: ips("fd00::a"), DNSPort: 53, HealthPort: 8080}},
	{"dual-stack", Spec{LocalIPs: ips("169.254.20.10", "fd00::a"), DNSPort: 53, HealthPort: 8080}},
	{"several-ips", Spec{
		LocalIPs:   ips("169.254.20.10", "10.96.0.10", "9.9.9.9", "fd00::a", "2001:db8::53", "fd00::10"),
		DNSPort:    53,
		HealthPort: 8080,
	}},
	{"custom-ports", Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 5353, HealthPort: 8081}},
	// The fallback for a kernel without nft_socket, and -setupiptables=false (sets and a marker chain).
	{"ungated", Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, Ungated: true}},
	// Both: without nft_socket the prerouting rules follow the bound addresses too.
	{"ungated-partial-bind", Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, Ungated: true, Unbound: ips("10.96.0.10")}},
	// A foreign drop covers the ClusterIP (supervisor/foreign.go): its queries are left to kube-dns.
	{"step-aside", Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10", "fd00::a"), DNSPort: 53, HealthPort: 8080, StepAside: ips("10.96.0.10")}},
	{"no-interception", Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, NoInterception: true}},
	// A Corefile whose bind leaves the ClusterIP out: host-network clients' rules match the bound sets.
	{"partial-bind", Spec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080, Unbound: ips("10.96.0.10")}},
}

func ips(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func goldenPath(name string) string { return filepath.Join("testdata", name+".nft") }

func readGolden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(goldenPath(name))
	if err != nil {
		t.Fatalf("read golden file (regenerate with `go test ./internal/nft -update`): %v", err)
	}
	return string(b)
}

func TestBuildGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.spec.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			got := Build(tc.spec).Text(TableName)
			if *update {
				if err := os.WriteFile(goldenPath(tc.name), []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := readGolden(t, tc.name); got != want {
				t.Errorf("Build(%+v).Text differs from %s:\n--- got\n%s--- want\n%s", tc.spec, goldenPath(tc.name), got, want)
			}
		})
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	a := Spec{LocalIPs: ips("10.96.0.10", "fd00::a", "169.254.20.10"), DNSPort: 53, HealthPort: 8080}
	b := Spec{LocalIPs: ips("169.254.20.10", "fd00::a", "10.96.0.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080}
	if ta, tb := Build(a).Text(TableName), Build(b).Text(TableName); ta != tb {
		t.Errorf("order or duplicates of LocalIPs change the ruleset:\n%s\n%s", ta, tb)
	}
}

func TestBuildKeepsBothSetsAndStaticRules(t *testing.T) {
	v4 := Build(Spec{LocalIPs: ips("169.254.20.10"), DNSPort: 53, HealthPort: 8080})
	v6 := Build(Spec{LocalIPs: ips("fd00::a"), DNSPort: 53, HealthPort: 8080})
	if len(v4.Sets) != 4 || len(v6.Sets) != 4 {
		t.Fatalf("want both address sets and both of the fallback's always, got %d and %d", len(v4.Sets), len(v6.Sets))
	}
	for i := range v4.Chains {
		if len(v4.Chains[i].Rules) != len(v6.Chains[i].Rules) {
			t.Errorf("chain %s: rules depend on the IP family", v4.Chains[i].Name)
		}
	}
	// node-cache has 12 rules per IP; we have 12 per family, whatever the number of IPs.
	n := 0
	for _, c := range v4.Chains {
		n += len(c.Rules)
		seen := map[string]bool{}
		for _, r := range c.Rules {
			if seen[r.Comment] {
				t.Errorf("chain %s: comment %q not unique (counters are keyed by chain+comment)", c.Name, r.Comment)
			}
			seen[r.Comment] = true
			if !strings.HasPrefix(r.Comment, "NodeLocal DNS Cache: ") {
				t.Errorf("comment %q lacks node-cache's prefix", r.Comment)
			}
		}
	}
	if n != 24 {
		t.Errorf("got %d rules, want 24 (node-cache's 12, for each family)", n)
	}
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{LocalIPs: ips("169.254.20.10"), DNSPort: 53, HealthPort: 8080}
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		want   string // substring of the error, "" for valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"no ips", func(s *Spec) { s.LocalIPs = nil }, "no local IPs"},
		{"dns port", func(s *Spec) { s.DNSPort = 0 }, "dns port"},
		{"health port", func(s *Spec) { s.HealthPort = 0 }, "health port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mutate(&s)
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want error containing %q", err, tc.want)
			}
		})
	}
}
