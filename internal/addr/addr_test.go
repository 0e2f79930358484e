package addr

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

// TestChecks is the one table for what every part of the agent accepts as listen IPs and interface name.
func TestChecks(t *testing.T) {
	ips := func(ss ...string) []netip.Addr {
		out := make([]netip.Addr, 0, len(ss))
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		check func() error
		err   string // substring; "" means accepted
	}{
		{"link-local IPv4", func() error { return CheckListenIPs(ips("169.254.20.10")) }, ""},
		{"dual stack", func() error { return CheckListenIPs(ips("169.254.20.10", "10.96.0.10", "fd00::10")) }, ""},
		{"loopback", func() error { return CheckListenIPs(ips("127.0.0.2")) }, ""},
		{"no IPs", func() error { return CheckListenIPs(nil) }, "no local IPs"},
		{"zero value", func() error { return CheckListenIPs([]netip.Addr{{}}) }, "invalid local IP"},
		{"zone", func() error { return CheckListenIPs(ips("fe80::1%eth0")) }, "zones are not supported"},
		{"IPv4-mapped", func() error { return CheckListenIPs(ips("::ffff:169.254.20.10")) }, "use 169.254.20.10"},
		{"unspecified IPv4", func() error { return CheckListenIPs(ips("0.0.0.0")) }, "unspecified"},
		{"unspecified IPv6", func() error { return CheckListenIPs(ips("::")) }, "unspecified"},
		{"multicast", func() error { return CheckListenIPs(ips("ff02::1")) }, "multicast"},
		{"duplicate", func() error { return CheckListenIPs(ips("10.96.0.10", "169.254.20.10", "10.96.0.10")) }, "10.96.0.10 listed twice"},
		{"bad IP after a good one", func() error { return CheckListenIPs(ips("169.254.20.10", "224.0.0.1")) }, "224.0.0.1: multicast"},

		{"node-cache default name", func() error { return CheckInterfaceName("nodelocaldns") }, ""},
		{"fifteen bytes", func() error { return CheckInterfaceName("abcdefghijklmno") }, ""},
		{"ifb prefix but not ifbN", func() error { return CheckInterfaceName("ifbx1") }, ""},
		{"just ifb", func() error { return CheckInterfaceName("ifb") }, ""},
		{"empty name", func() error { return CheckInterfaceName("") }, "empty"},
		{"sixteen bytes", func() error { return CheckInterfaceName("abcdefghijklmnop") }, "longer than 15"},
		{"dot", func() error { return CheckInterfaceName(".") }, "not a valid"},
		{"dot dot", func() error { return CheckInterfaceName("..") }, "not a valid"},
		{"slash", func() error { return CheckInterfaceName("a/b") }, "contains"},
		{"colon", func() error { return CheckInterfaceName("eth0:1") }, "contains"},
		{"space", func() error { return CheckInterfaceName("a b") }, "contains"},
		{"NUL", func() error { return CheckInterfaceName("a\x00b") }, "contains"},
		{"ifb0", func() error { return CheckInterfaceName("ifb0") }, "reserved"},
		{"ifb17", func() error { return CheckInterfaceName("ifb17") }, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// TestClient: a writer's UDP and TCP addresses give their address and port as they are (an IPv4-mapped one
// stays mapped); anything else, and none, is not an address.
func TestClient(t *testing.T) {
	mapped := netip.MustParseAddrPort("[::ffff:10.1.2.3]:5353")
	for _, c := range []struct {
		name string
		a    net.Addr
		want netip.AddrPort
		ok   bool
	}{
		{"UDP", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.1.2.3:5353")), netip.MustParseAddrPort("10.1.2.3:5353"), true},
		{"TCP over IPv6", net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[fd00::1]:53")), netip.MustParseAddrPort("[fd00::1]:53"), true},
		{"IPv4-mapped", net.UDPAddrFromAddrPort(mapped), mapped, true},
		{"nil", nil, netip.AddrPort{}, false},
		{"a unix socket", &net.UnixAddr{Name: "/run/x", Net: "unix"}, netip.AddrPort{}, false},
	} {
		if got, ok := Client(c.a); got != c.want || ok != c.ok {
			t.Errorf("%s: Client(%v) = %v, %v; want %v, %v", c.name, c.a, got, ok, c.want, c.ok)
		}
	}
}
