package link

import (
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"go.uber.org/zap/zaptest"
)

// Kernel tests. Conventions as in manager_test.go; each runs in the package's throwaway network namespace.

func TestKernelProbeMatchesIproute2(t *testing.T) {
	testenv.RequireRoot(t)
	// Ask the kernel independently whether it has the dummy kind.
	out, err := exec.Command("ip", "link", "add", "nldns-chk", "type", "dummy").CombinedOutput()
	want := KindDummy
	if err != nil {
		want = KindIfb
		t.Logf("this kernel has no dummy kind (ip: %s): expecting the ifb fallback", strings.TrimSpace(string(out)))
	} else {
		ip(t, "link", "del", "nldns-chk")
	}
	m := kernelManager(t)
	if m.Kind() != want {
		t.Fatalf("Kind() = %q, want %q", m.Kind(), want)
	}
	if _, ok := ipShow(t, trialName); ok {
		t.Errorf("trial link %s left behind", trialName)
	}
}

func TestKernelEnsure(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"probed", nil}, {"forced ifb fallback", []Option{withoutDummy()}}} {
		t.Run(tc.name, func(t *testing.T) {
			m := kernelManager(t, tc.opts...)
			if tc.opts != nil && m.Kind() != KindIfb {
				t.Fatalf("withoutDummy: Kind() = %q, want ifb", m.Kind())
			}
			s := testSpec()
			changes, err := m.Ensure(s)
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if len(changes) != 5 {
				t.Errorf("first Ensure changes = %q, want create, up and three addresses", changes)
			}
			wantKernelState(t, m, m.Kind())
			if changes, err := m.Ensure(s); err != nil || len(changes) != 0 {
				t.Errorf("second Ensure = %q, %v; want no changes", changes, err)
			}
			// Usable at once: bind to every listen IP right after Ensure (an IPv6 address still in DAD is not).
			for _, a := range s.IPs {
				c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
				if err != nil {
					t.Errorf("bind %s right after Ensure: %v", a, err)
					continue
				}
				c.Close()
			}
		})
	}
}

func TestKernelEnsureRepairs(t *testing.T) {
	testenv.RequireRoot(t)
	m := kernelManager(t)
	s := testSpec()
	if _, err := m.Ensure(s); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	tampers := []struct {
		name string
		do   [][]string
		want []string // what Ensure repairs; nil: anything, as long as it ends in sync
	}{
		{"stray addresses", [][]string{
			{"addr", "add", "192.0.2.7/24", "dev", s.Name},
			{"addr", "add", "169.254.20.10/16", "dev", s.Name},
			{"addr", "add", "2001:db8::7/64", "dev", s.Name, "nodad"},
		}, []string{
			"remove address 169.254.20.10/16 from nodelocaldns",
			"remove address 192.0.2.7/24 from nodelocaldns",
			"remove address 2001:db8::7/64 from nodelocaldns",
		}},
		{"address deleted", [][]string{{"addr", "del", "169.254.20.10/32", "dev", s.Name}},
			[]string{"add address 169.254.20.10/32 to nodelocaldns"}},
		// The kernel drops IPv6 addresses of a link set down (keep_addr_on_down=0): both must come back.
		{"link down", [][]string{{"link", "set", s.Name, "down"}},
			[]string{"set link nodelocaldns up", "add address fd00::10/128 to nodelocaldns"}},
		{"link deleted", [][]string{{"link", "del", s.Name}}, nil},
	}
	for _, tc := range tampers {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range tc.do {
				ip(t, args...)
			}
			changes, err := m.Ensure(s)
			if err != nil || len(changes) == 0 {
				t.Fatalf("Ensure after tamper = %q, %v; want repairs", changes, err)
			}
			if tc.want != nil && !slices.Equal(changes, tc.want) {
				t.Errorf("Ensure = %q, want %q", changes, tc.want)
			}
			wantKernelState(t, m, m.Kind())
		})
	}
}

func TestKernelRemove(t *testing.T) {
	testenv.RequireRoot(t)
	m := kernelManager(t)
	s := testSpec()
	if _, err := m.Ensure(s); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if removed, err := m.Remove(s.Name); err != nil || !removed {
		t.Fatalf("Remove = %v, %v; want true, nil", removed, err)
	}
	if _, ok := ipShow(t, s.Name); ok {
		t.Fatal("ip still sees the link after Remove")
	}
	if removed, err := m.Remove(s.Name); err != nil || removed {
		t.Fatalf("second Remove (absent link) = %v, %v; want false, nil", removed, err)
	}
}

func TestKernelRefusesForeignLink(t *testing.T) {
	testenv.RequireRoot(t)
	m := kernelManager(t)
	s := testSpec()
	ip(t, "link", "add", s.Name, "type", "veth", "peer", "name", "nldns-peer")
	ip(t, "addr", "add", "192.0.2.1/24", "dev", s.Name)
	t.Cleanup(func() { exec.Command("ip", "link", "del", s.Name).Run() })
	if _, err := m.Ensure(s); err == nil {
		t.Fatal("Ensure took over a veth")
	}
	if _, err := m.Remove(s.Name); err == nil {
		t.Fatal("Remove deleted a veth")
	}
	l, ok := ipShow(t, s.Name)
	if !ok || !slices.Equal(l.globalAddrs(), []string{"192.0.2.1/24"}) {
		t.Fatalf("veth changed: %+v", l)
	}
}

func TestKernelNewWithStaleProbeLink(t *testing.T) {
	testenv.RequireRoot(t)
	ip(t, "link", "add", trialName, "type", "ifb")
	m, err := New(zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("New with a stale trial link: %v", err)
	}
	m.Close()
	if _, ok := ipShow(t, trialName); ok {
		t.Error("stale trial link still there")
	}
}
