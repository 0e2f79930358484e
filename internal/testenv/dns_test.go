package testenv

import (
	"net"
	"strconv"
	"testing"
)

// FreePort hands out ports below the ephemeral range, free over both TCP and UDP, and not the same one twice in
// a row.
func TestFreePort(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	if hi-lo < 1000 {
		t.Skipf("the ephemeral range starts at %d: no room below it, FreePort takes the kernel's pick", hi)
	}
	seen := map[string]bool{}
	for range 20 {
		port := FreePort(t, "udp")
		n, err := strconv.Atoi(port)
		if err != nil || n < lo || n >= hi {
			t.Fatalf("FreePort: %q, want a port in [%d, %d)", port, lo, hi)
		}
		if seen[port] {
			t.Errorf("FreePort handed out %s twice", port)
		}
		seen[port] = true
		addr := net.JoinHostPort("127.0.0.1", port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen tcp on FreePort's %s: %v", port, err)
		}
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("listen udp on FreePort's %s: %v", port, err)
		}
		ln.Close()
		pc.Close()
	}
}
