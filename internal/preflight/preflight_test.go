package preflight

import (
	"errors"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

var (
	v4   = []netip.Addr{netip.MustParseAddr("169.254.20.10")}
	dual = append(v4, netip.MustParseAddr("fd00::10"))
)

// fakeNode answers as a kernel of release rel that lacks the named nftables capabilities (the kernel's ENOENT
// for a missing expression module), with the IPv6 sysctl's content (absent: no IPv6 in the kernel).
func fakeNode(rel string, probeErr error, ipv6 *string, lacks ...string) Node {
	return Node{
		Release: func() (string, error) { return rel, nil },
		Try: func() ([]Tried, error) {
			if probeErr != nil {
				return nil, probeErr
			}
			var out []Tried
			for _, c := range Capabilities() {
				p := Tried{Capability: c, Present: true}
				for _, l := range lacks {
					if l == c.Name {
						p.Present, p.Refusal = false, syscall.ENOENT
					}
				}
				out = append(out, p)
			}
			return out, nil
		},
		ReadFile: func(name string) ([]byte, error) {
			if name != ipv6Sysctl || ipv6 == nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
			}
			return []byte(*ipv6 + "\n"), nil
		},
	}
}

func ptr(s string) *string { return &s }

func TestLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		node Node
		ips  []netip.Addr
		want []string // substrings, each of the line at its index
	}{
		{"full kernel", fakeNode("6.1.0-18-amd64", nil, ptr("0")), v4,
			[]string{"nodelocaldns: preflight: kernel 6.1.0-18-amd64: nothing missing (owner-flag, socket, conntrack, ipv6-rewrite)"}},
		{"full kernel, IPv6 configured", fakeNode("6.1.0", nil, ptr("0")), dual,
			[]string{"nothing missing (owner-flag, socket, conntrack, ipv6-rewrite, ipv6)"}},
		{"no nft_socket", fakeNode("6.6.0-azl3", nil, ptr("0"), CapSocket), v4,
			[]string{"MISSING socket: the socket expression (nft_socket, CONFIG_NFT_SOCKET): pods' queries are intercepted for the addresses the agent has bound",
				"kernel 6.6.0-azl3 lacks socket; has owner-flag, conntrack, ipv6-rewrite"}},
		{"no nft_socket, no conntrack, IPv6 disabled", fakeNode("6.12.0", nil, ptr("1"), CapSocket, CapConntrack), dual,
			[]string{"MISSING socket", "MISSING conntrack: conntrack's expressions (nft_ct", "MISSING ipv6: IPv6 (an IPv6 -localip is configured): the agent cannot start",
				"lacks socket, conntrack, ipv6; has owner-flag, ipv6-rewrite"}},
		{"IPv6 not in the kernel", fakeNode("6.12.0", nil, nil), dual,
			[]string{"MISSING ipv6", "lacks ipv6"}},
		{"IPv6 disabled, but not configured", fakeNode("6.12.0", nil, ptr("1")), v4,
			[]string{"nothing missing (owner-flag, socket, conntrack, ipv6-rewrite)"}},
		{"not tried, old kernel", fakeNode("5.10.0-21-amd64", syscall.EPERM, ptr("0")), v4,
			[]string{"MISSING owner-flag: the table owner flag (NFT_TABLE_F_OWNER, Linux 5.12): the agent cannot start", "has none; not tried: socket, conntrack, ipv6-rewrite"}},
		{"not tried, new kernel", fakeNode("5.15.0-91-generic", syscall.EPERM, ptr("0")), v4,
			[]string{"kernel 5.15.0-91-generic has owner-flag; not tried: socket, conntrack, ipv6-rewrite (operation not permitted: needs CAP_NET_ADMIN"}},
		{"not tried, release not understood", fakeNode("6", syscall.EPERM, ptr("0")), v4,
			[]string{"kernel 6 has none; not tried: owner-flag, socket, conntrack, ipv6-rewrite"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := tc.node.Check(tc.ips).Lines()
			if len(lines) != len(tc.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tc.want), strings.Join(lines, "\n"))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], "nodelocaldns: preflight: ") || !strings.Contains(lines[i], w) {
					t.Errorf("line %d = %q, want it to contain %q", i, lines[i], w)
				}
			}
			for _, l := range lines {
				if strings.Contains(l, "MISSING owner-flag") && !strings.Contains(l, "invalid argument") {
					t.Errorf("%q does not say what the agent's error looks like", l)
				}
			}
		})
	}
}

// The agent's start-up: one warning per missing capability, with its cost; one info line when nothing is
// missing; and the gauge, 0 for what is missing, 1 for what is there, nothing for what was not tried.
func TestLogAndExport(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report Report
		warns  []string // capability field of each warning
		info   bool
		gauge  map[string]float64
	}{
		{"full", fakeNode("6.1.0", nil, ptr("0")).Check(dual), nil, true,
			map[string]float64{"owner-flag": 1, "socket": 1, "conntrack": 1, "ipv6-rewrite": 1, "ipv6": 1}},
		{"no nft_socket", fakeNode("6.6.0", nil, ptr("0"), CapSocket).Check(v4), []string{"socket"}, false,
			map[string]float64{"owner-flag": 1, "socket": 0, "conntrack": 1, "ipv6-rewrite": 1}},
		{"not tried", fakeNode("6.6.0", errors.New("probe owner-flag: operation not permitted"), ptr("1")).Check(dual), []string{"ipv6", ""}, false,
			map[string]float64{"owner-flag": 1, "ipv6": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			tc.report.Log(zap.New(core))
			var warns []string
			info := false
			for _, e := range logs.All() {
				switch e.Level {
				case zap.WarnLevel:
					c, _ := e.ContextMap()["capability"].(string)
					warns = append(warns, c)
					if c != "" && e.ContextMap()["cost"] == "" {
						t.Errorf("warning for %s without its cost", c)
					}
				case zap.InfoLevel:
					info = true
				}
			}
			if strings.Join(warns, ",") != strings.Join(tc.warns, ",") || info != tc.info {
				t.Errorf("warnings %q, info %v; want %q, %v", warns, info, tc.warns, tc.info)
			}
			g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodelocaldns_node_capability", Help: "h"}, []string{"name"})
			g.WithLabelValues("stale").Set(1) // from an earlier report: gone
			tc.report.Export(g)
			if got := gathered(t, g); !maps.Equal(got, tc.gauge) {
				t.Errorf("node_capability = %v, want %v", got, tc.gauge)
			}
		})
	}
}

// The real node, in a throwaway network namespace: every capability there on this machine's kernel (but what
// a VM boot holds back), IPv6 among them; with IPv6 disabled for new interfaces in the namespace (net.ipv6.conf.default.disable_ipv6,
// which ours would follow), the report names it.
func TestHost(t *testing.T) {
	testenv.RequireRoot(t)
	r := Host().Check(dual)
	held := os.Getenv("NODELOCALDNS_VM_HELD_BACK")
	for _, f := range r.Findings {
		wantMissing := f.Name == CapSocket && strings.Contains(held, "nft_socket") ||
			f.Name == CapConntrack && (strings.Contains(held, "nft_ct") || strings.Contains(held, "nf_conntrack"))
		if !f.Known || f.Present == wantMissing {
			t.Errorf("%s: known %v, present %v (%s); held back %q", f.Name, f.Known, f.Present, f.Why, held)
		}
	}
	if len(r.Findings) != 5 {
		t.Errorf("findings %v, want owner-flag, socket, conntrack, ipv6-rewrite, ipv6", r.Findings)
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("0"), 0)
	missing := Host().Check(dual).Missing()
	if len(missing) == 0 || missing[len(missing)-1].Name != CapIPv6 || missing[len(missing)-1].Why != "net.ipv6.conf.default.disable_ipv6 = 1" {
		t.Errorf("with IPv6 disabled, missing %v, want ipv6 with the sysctl's value", missing)
	}
}

// gathered is g's series as a registry serves them: name label -> value.
func gathered(t *testing.T, g *prometheus.GaugeVec) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(g)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}
