package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// ServeDNS serves h over UDP and TCP on addr ("192.0.2.1:53", "127.0.0.1:0") until the returned stop is called
// or the test ends, and returns the address it listens on. Sockets open on the calling thread's namespace.
func ServeDNS(t testing.TB, addr string, h dns.Handler) (bound string, stop func()) {
	t.Helper()
	pc, ln, err := listenBoth(addr)
	if err != nil {
		t.Fatalf("dns server: %v", err)
	}
	bound = pc.LocalAddr().String()
	servers := []*dns.Server{{PacketConn: pc, Handler: h, UDPSize: 65535}, {Listener: ln, Handler: h}}
	for _, s := range servers {
		go func() { _ = s.ActivateAndServe() }()
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		// Shutdown fails, leaving the sockets bound, if a server goroutine has not started yet: close the sockets
		// too, so that the next server can bind the same address.
		for _, s := range servers {
			_ = s.Shutdown()
		}
		pc.Close()
		ln.Close()
	}
	t.Cleanup(stop)
	return bound, stop
}

// listenBoth listens on addr over UDP, then over TCP on the port UDP got. With port 0 the kernel picks the UDP
// port alone, and the same TCP port can be taken (a connection's ephemeral port, another test's listener): then
// it tries another, a few times.
func listenBoth(addr string) (net.PacketConn, net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	tries := 1
	if port == "0" {
		tries = 20
	}
	for i := 1; ; i++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen udp %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if i == tries {
			return nil, nil, fmt.Errorf("listen tcp on the port udp got (%d tries): %w", tries, err)
		}
	}
}

// FreePort is a port on 127.0.0.1 that was free over both TCP and UDP a moment ago (network, "tcp" or "udp",
// is the one the caller needs), for a server the test starts on it next. It is chosen below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), from a random start and then in turn, so that no
// connection's source port and no other test's bind to port 0 can take it meanwhile: a port the kernel handed
// out (bind to :0 and close) is the next connect's source port as likely as any, and CI met
// "address already in use" on it. Where the range leaves no room below it, the kernel's pick it is.
func FreePort(t testing.TB, network string) string {
	t.Helper()
	if network != "tcp" && network != "udp" {
		t.Fatalf("FreePort: network %q, want tcp or udp", network)
	}
	lo, hi := portsBelowEphemeral()
	for range hi - lo {
		p := lo + int(nextPort.Add(1))%(hi-lo)
		if bothFree(p) {
			return strconv.Itoa(p)
		}
	}
	pc, ln, err := listenBoth("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer ln.Close()
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	return port
}

// nextPort is where FreePort looks next, from a random start: test binaries running side by side (go test
// runs packages in parallel) start apart.
var nextPort atomic.Uint32

func init() { nextPort.Store(rand.Uint32()) }

// portsBelowEphemeral is [lo, hi): the ports FreePort hands out, above the registered services' usual ports
// and below this namespace's ephemeral range; empty where the range starts too low.
func portsBelowEphemeral() (lo, hi int) {
	lo, hi = 10000, 32768 // the range's default start
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	if hi-lo < 1000 {
		return 0, 0
	}
	return lo, hi
}

// bothFree says whether 127.0.0.1:port can be bound over TCP and UDP now.
func bothFree(port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}
