package link

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenDir holds the golden plans, beside this package.
const goldenDir = "testdata"

// TestDiffGolden renders the plan for each observed state in one golden file, so a change in what Ensure would
// do (or how it says it) shows up as a reviewed diff. Conventions: 169.254.20.10 is the link-local listen IP,
// 10.96.0.10 the kube-dns ClusterIP, fd00::10 an IPv6 listen IP, 192.0.2.0/24 a stray address.
func TestDiffGolden(t *testing.T) {
	spec := Spec{Name: "nodelocaldns", IPs: []netip.Addr{
		netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")}}
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	all := pfx("169.254.20.10/32", "10.96.0.10/32", "fd00::10/128")
	cases := []struct {
		name string
		obs  observed
	}{
		{"missing", observed{}},
		{"in sync", observed{exists: true, kind: KindDummy, up: true, addrs: all}},
		{"in sync with kernel link-local", observed{exists: true, kind: KindIfb, up: true,
			addrs: append(pfx("fe80::1/64"), all...)}},
		{"node-cache left it down", observed{exists: true, kind: KindDummy, addrs: all}},
		{"no addresses", observed{exists: true, kind: KindDummy, up: true}},
		{"stray and wrong prefix length", observed{exists: true, kind: KindDummy, up: true,
			addrs: pfx("192.0.2.7/24", "169.254.20.10/16", "10.96.0.10/32", "fd00::10/128")}},
		{"foreign kind", observed{exists: true, kind: "veth", up: true, addrs: all}},
	}
	var b strings.Builder
	for _, c := range cases {
		fmt.Fprintf(&b, "## %s\n", c.name)
		p, err := diff(spec, c.obs)
		lines := p.describe(spec.Name, KindDummy)
		switch {
		case err != nil:
			fmt.Fprintf(&b, "error: %v\n", err)
		case len(lines) == 0:
			b.WriteString("in sync\n")
		default:
			for _, line := range lines {
				b.WriteString(line + "\n")
			}
		}
		b.WriteString("\n")
	}
	golden(t, "plans.golden", b.String())
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatalf("update golden file: %v", err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update if intended)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
