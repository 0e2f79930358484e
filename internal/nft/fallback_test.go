package nft

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables/expr"
)

// fallbackCases are shared with the kernel test, which applies each and compares nft's listing.
var fallbackCases = []struct {
	name string
	spec FallbackSpec
}{
	{"fallback-ipv4", FallbackSpec{Targets: addrs("10.96.0.10"), Covered: pairs("169.254.20.10:53"), Lease: 15 * time.Minute}},
	// Two instances' addresses on two ports, an IPv6 local IP the IPv4 ClusterIP cannot serve, and the
	// ClusterIP itself, which fails open through kube-proxy.
	{"fallback-mixed", FallbackSpec{
		Targets: addrs("10.96.0.10"),
		Covered: pairs("169.254.20.11:53", "[fd00::a]:53", "169.254.20.10:5353", "10.96.0.10:53", "169.254.20.11:53"),
		Lease:   90 * time.Second,
	}},
	// An IPv6-only cluster: the local address and the ClusterIP are IPv6.
	{"fallback-ipv6", FallbackSpec{Targets: addrs("fd00:96::a"), Covered: pairs("[fd00::10]:53", "[fd00:96::a]:53"), Lease: 15 * time.Minute}},
	// Dual-stack: a ClusterIP of each family, each family's local IPs towards its own.
	{"fallback-dual-stack", FallbackSpec{
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

func TestBuildFallbackGolden(t *testing.T) {
	for _, tc := range fallbackCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.spec.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			got := BuildFallback(tc.spec).String()
			if *update {
				if err := os.WriteFile(goldenPath(tc.name), []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := readGolden(t, tc.name); got != want {
				t.Errorf("BuildFallback(%+v).String() differs from %s:\n--- got\n%s--- want\n%s", tc.spec, goldenPath(tc.name), got, want)
			}
		})
	}
}

func TestBuildFallbackCovers(t *testing.T) {
	f := BuildFallback(fallbackCases[1].spec)
	if got, want := f.Covered(), pairs("169.254.20.10:5353", "169.254.20.11:53"); !slices.Equal(got, want) {
		t.Errorf("covered %v, want %v (sorted, once each, the ClusterIP left out)", got, want)
	}
	if got, want := f.Skipped, pairs("[fd00::a]:53"); !slices.Equal(got, want) {
		t.Errorf("skipped %v, want %v (not the ClusterIP's family)", got, want)
	}
	// Every instance must build the same table from the same instances, whatever order it sees them in.
	again := fallbackCases[1].spec
	again.Covered = slices.Clone(again.Covered)
	slices.Reverse(again.Covered)
	if BuildFallback(again).String() != f.String() {
		t.Error("the order of the covered pairs changes the fallback table")
	}
	// Nothing of it reads or writes a mark: other networking software owns those bits.
	for _, c := range f.Chains {
		for _, r := range c.Rules {
			for _, e := range r.exprs() {
				if m, ok := e.(*expr.Meta); ok && m.Key == expr.MetaKeyMARK {
					t.Errorf("chain %s: rule %q uses the packet mark", c.Name, r)
				}
				if ct, ok := e.(*expr.Ct); ok && ct.Key == expr.CtKeyMARK {
					t.Errorf("chain %s: rule %q uses the conntrack mark", c.Name, r)
				}
			}
		}
	}
	// One reply rule per protocol and port, in both reply chains.
	for _, c := range f.Chains {
		if c.Name == ChainPodReply || c.Name == ChainHostReply {
			if len(c.Rules) != 4 {
				t.Errorf("chain %s has %d rules, want 4 (udp and tcp, ports 53 and 5353)", c.Name, len(c.Rules))
			}
		}
	}
}

func TestFallbackSpecValidate(t *testing.T) {
	for _, s := range []FallbackSpec{
		{Covered: pairs("169.254.20.10:53"), Lease: time.Minute},
		{Targets: addrs("0.0.0.0"), Covered: pairs("169.254.20.10:53"), Lease: time.Minute},
		{Targets: addrs("10.96.0.10"), Covered: pairs("169.254.20.10:0"), Lease: time.Minute},
		{Targets: addrs("10.96.0.10"), Covered: pairs("169.254.20.10:53")},
		{Targets: addrs("10.96.0.10", "10.96.0.11"), Covered: pairs("169.254.20.10:53"), Lease: time.Minute},
		{Targets: addrs("::ffff:10.96.0.10"), Covered: pairs("169.254.20.10:53"), Lease: time.Minute},
	} {
		if s.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", s)
		}
	}
}

func TestNftDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		15 * time.Minute: "15m", 90 * time.Second: "1m30s", 3 * time.Second: "3s", 500 * time.Millisecond: "500ms",
		time.Hour + 30*time.Minute + 5*time.Second: "1h30m5s", 49 * time.Hour: "2d1h",
	} {
		if got := nftDuration(d); got != want {
			t.Errorf("nftDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestFallbackGenerationPinsTheRules: the rules of every fallback case, stamp aside, are those pinned for this
// build's generation. A change to BuildFallback's rules fails here until fallbackGeneration is bumped and the
// new rules pinned: otherwise two versions of the same generation and different rules would rewrite each
// other's table for ever (fallback_stamp.go).
func TestFallbackGenerationPinsTheRules(t *testing.T) {
	pinned := map[int]string{
		1: "7613192a2ab120e6",
		2: "e8cc6c52c27f201f", // fallback_generation_next.go's: the convergence test's build
	}
	h := sha256.New()
	for _, tc := range fallbackCases {
		f := BuildFallback(tc.spec)
		if !strings.Contains(f.String(), fmt.Sprintf("%q", f.Stamp.String())) {
			t.Errorf("%s: the table does not carry its stamp %q", tc.name, f.Stamp)
		}
		h.Write([]byte(strings.ReplaceAll(f.String(), fmt.Sprintf(" comment %q", f.Stamp.String()), "")))
	}
	if got := hex.EncodeToString(h.Sum(nil))[:16]; got != pinned[fallbackGeneration] {
		t.Errorf("the fallback's rules are not those pinned for generation %d (sha256 %s): bump fallbackGeneration in fallback_generation.go and pin the new rules here",
			fallbackGeneration, got)
	}
}

func TestFallbackStampRoundTrip(t *testing.T) {
	f := BuildFallback(fallbackCases[len(fallbackCases)-1].spec)
	s, ok := ParseStamp(f.Stamp.String())
	if !ok || s.Generation != fallbackGeneration || !s.SameDecision(f) || s.Newer() {
		t.Errorf("stamp %q read back as %+v (ok %v)", f.Stamp, s, ok)
	}
	if _, ok := ParseStamp("nodelocaldns-fallback generation x towards 10.96.0.10"); ok {
		t.Error("a stamp with no number was read")
	}
	newer := FallbackStamp{Generation: fallbackGeneration + 1, Targets: f.Stamp.Targets}
	if !newer.Newer() {
		t.Error("a later generation is not newer")
	}
}
