package testenv

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// ServeDNS serves h over UDP and TCP on addr ("192.0.2.1:53", "127.0.0.1:0") until the returned stop is called
// or the test ends, and returns the address it listens on. Sockets open on the calling thread's namespace.
func ServeDNS(t testing.TB, addr string, h dns.Handler) (bound string, stop func()) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("dns server: listen udp %s: %v", addr, err)
	}
	bound = pc.LocalAddr().String()
	ln, err := net.Listen("tcp", bound)
	if err != nil {
		pc.Close()
		t.Fatalf("dns server: listen tcp %s: %v", bound, err)
	}
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
