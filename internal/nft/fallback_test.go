package nft

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// fallbackCases are shared with the kernel test, which applies each and compares nft's listing.
var fallbackCases = []struct {
	name string
	spec FallbackSpec
}{
	{"fallback-ipv4", FallbackSpec{LocalIPs: ips("169.254.20.10", "10.96.0.10"), Upstream: netip.MustParseAddr("10.96.0.11"), DNSPort: 53}},
	// A surge adding an address, IPv6 local IPs the IPv4 upstream cannot serve, and the upstream itself.
	{"fallback-mixed", FallbackSpec{
		LocalIPs: ips("169.254.20.11", "fd00::a", "169.254.20.10", "10.96.0.11"),
		Upstream: netip.MustParseAddr("10.96.0.11"), DNSPort: 5353,
	}},
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
	if got, want := f.Covered, ips("169.254.20.10", "169.254.20.11"); !equalAddrs(got, want) {
		t.Errorf("covered %v, want %v (sorted, upstream left out)", got, want)
	}
	if got, want := f.Skipped, ips("fd00::a"); !equalAddrs(got, want) {
		t.Errorf("skipped %v, want %v (not the upstream's family)", got, want)
	}
	// Every instance must build the same table from the same union, whatever order it sees.
	again := fallbackCases[1].spec
	again.LocalIPs = ips("10.96.0.11", "169.254.20.10", "fd00::a", "169.254.20.11", "169.254.20.10")
	if BuildFallback(again).String() != f.String() {
		t.Error("order or duplicates of LocalIPs change the fallback table")
	}
	var many []netip.Addr
	for i := range MaxFallbackIPs + 2 {
		many = append(many, netip.AddrFrom4([4]byte{169, 254, 20, byte(10 + i)}))
	}
	f = BuildFallback(FallbackSpec{LocalIPs: many, Upstream: netip.MustParseAddr("10.96.0.11"), DNSPort: 53})
	if len(f.Covered) != MaxFallbackIPs || len(f.Skipped) != 2 {
		t.Errorf("%d addresses: covered %d, skipped %d; want %d and 2", len(many), len(f.Covered), len(f.Skipped), MaxFallbackIPs)
	}
	// Each covered address has its own mark value, so each reply gets its own address back; 0x70 is the
	// instances' alive mark, never an address's.
	if s := f.String(); !strings.Contains(s, "== 0x00000060 ip saddr 10.96.0.11 ip saddr set 169.254.20.15") ||
		strings.Contains(s, "== 0x00000070 ip saddr") {
		t.Errorf("the 6th address does not get mark 0x60, or an address got the alive mark:\n%s", s)
	}
}

func TestFallbackSpecValidate(t *testing.T) {
	for _, s := range []FallbackSpec{
		{LocalIPs: ips("169.254.20.10"), DNSPort: 53},
		{LocalIPs: ips("169.254.20.10"), Upstream: netip.MustParseAddr("0.0.0.0"), DNSPort: 53},
		{LocalIPs: ips("169.254.20.10"), Upstream: netip.MustParseAddr("10.96.0.11")},
		{LocalIPs: ips("fd00::a"), Upstream: netip.MustParseAddr("fd00:96::b"), DNSPort: 53},
	} {
		if s.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", s)
		}
	}
}

// TestPayloadCsumFlagsNeedL3Csum pins why IPv6 has no fallback (ErrFallbackIPv6): google/nftables v0.3.0
// marshals a payload write's checksum flags only with an L3 checksum type. When this fails after an upgrade,
// the IPv6 rewrite can be built: drop ErrFallbackIPv6.
func TestPayloadCsumFlagsNeedL3Csum(t *testing.T) {
	write := func(ct expr.PayloadCsumType) *expr.Payload {
		return &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader,
			Offset: 24, Len: 16, CsumType: ct, CsumFlags: unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR}
	}
	has := func(p *expr.Payload) bool {
		b, err := expr.Marshal(unix.NFPROTO_INET, p)
		if err != nil {
			t.Fatal(err)
		}
		var back expr.Payload
		data, _ := expr.MarshalExprData(unix.NFPROTO_INET, p)
		if err := expr.Unmarshal(unix.NFPROTO_INET, data, &back); err != nil {
			t.Fatal(err)
		}
		return len(b) > 0 && back.CsumFlags != 0
	}
	if !has(write(expr.CsumTypeInet)) {
		t.Fatal("checksum flags lost even with an L3 checksum: the test no longer observes the library")
	}
	if has(write(expr.CsumTypeNone)) {
		t.Error("google/nftables now sends checksum flags without an L3 checksum: the IPv6 fallback can be built (drop ErrFallbackIPv6)")
	}
}

func equalAddrs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
