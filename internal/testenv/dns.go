package testenv

import (
	"fmt"
	"net"
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

// FreePort is a port on 127.0.0.1 that was free for network ("tcp" or "udp") a moment ago.
func FreePort(t testing.TB, network string) string {
	t.Helper()
	var addr net.Addr
	if network == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		addr = pc.LocalAddr()
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addr = ln.Addr()
	}
	_, port, _ := net.SplitHostPort(addr.String())
	return port
}
