package link

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// ipLink is the part of `ip -j -d addr show` the tests read: iproute2 is our independent observer of the kernel.
type ipLink struct {
	Name     string   `json:"ifname"`
	Flags    []string `json:"flags"`
	LinkInfo struct {
		Kind string `json:"info_kind"`
	} `json:"linkinfo"`
	Addrs []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
		Scope     string `json:"scope"`
		Tentative bool   `json:"tentative"`
	} `json:"addr_info"`
}

func (l ipLink) up() bool { return slices.Contains(l.Flags, "UP") }

// globalAddrs returns the link's addresses except the kernel's IPv6 link-local, sorted, as "ip/len".
func (l ipLink) globalAddrs() []string {
	var out []string
	for _, a := range l.Addrs {
		if a.Scope != "link" {
			out = append(out, netip.PrefixFrom(netip.MustParseAddr(a.Local), a.PrefixLen).String())
		}
	}
	slices.Sort(out)
	return out
}

// ipShow runs `ip -j -d addr show dev name`; ok is false when the link does not exist.
func ipShow(t *testing.T, name string) (l ipLink, ok bool) {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-d", "addr", "show", "dev", name).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && strings.Contains(string(ee.Stderr), "does not exist") {
		return ipLink{}, false
	}
	if err != nil {
		t.Fatalf("ip addr show dev %s: %v", name, err)
	}
	var links []ipLink
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("parse `ip -j addr show dev %s` (%v): %s", name, err, out)
	}
	return links[0], true
}

// ip runs an iproute2 command as a tamperer or setup step.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// kernelManager returns a Manager on the test's namespace; the link named in testSpec is removed afterwards.
func kernelManager(t *testing.T, opts ...Option) *Manager {
	t.Helper()
	m, err := New(zaptest.NewLogger(t), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if _, err := m.Remove(testSpec().Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		m.Close()
	})
	return m
}

// wantKernelState asserts, through iproute2, that the link is UP, of kind, and carries exactly want (plus the
// kernel's own link-local), none of ours tentative; and, through our own read-back, that Ensure finds nothing to do.
func wantKernelState(t *testing.T, m *Manager, kind string) {
	t.Helper()
	s := testSpec()
	l, ok := ipShow(t, s.Name)
	if !ok {
		t.Fatalf("ip: link %s does not exist", s.Name)
	}
	want := []string{"10.96.0.10/32", "169.254.20.10/32", "fd00::10/128"}
	if got := l.globalAddrs(); !l.up() || l.LinkInfo.Kind != kind || !slices.Equal(got, want) {
		t.Errorf("ip sees kind=%q flags=%v addrs=%v; want %s, UP, %v", l.LinkInfo.Kind, l.Flags, got, kind, want)
	}
	for _, a := range l.Addrs {
		if a.Tentative && a.Scope != "link" {
			t.Errorf("address %s is tentative (DAD not skipped)", a.Local)
		}
	}
	if changes, err := m.Ensure(s); err != nil || changes != nil {
		t.Errorf("Ensure (netlink read-back) = %q, %v; want in sync", changes, err)
	}
}
