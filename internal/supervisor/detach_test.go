package supervisor

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// listenReusePort binds a UDP socket with SO_REUSEPORT on loopback, as CoreDNS binds its listeners.
func listenReusePort(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1) })
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.(*net.UDPConn)
}

// sendFromFreshPorts sends n datagrams to addr, each from a new source port so the group's hash spreads them.
func sendFromFreshPorts(t *testing.T, addr *net.UDPAddr, n int) {
	t.Helper()
	for range n {
		c, err := net.DialUDP("udp", nil, addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("q"))
		c.Close()
	}
}

// drain counts the datagrams queued on c.
func drain(c *net.UDPConn) int {
	n := 0
	buf := make([]byte, 16)
	for {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(buf); err != nil {
			return n
		}
		n++
	}
}

func TestDetachListenersHandsNewQueriesToTheOtherInstance(t *testing.T) {
	old1 := listenReusePort(t, "127.0.0.1:0")
	addr := old1.LocalAddr().(*net.UDPAddr)
	old2 := listenReusePort(t, addr.String())
	const n = 64

	sendFromFreshPorts(t, addr, n)
	queued1, queued2 := drain(old1), drain(old2)
	if queued1+queued2 != n || queued1 == 0 || queued2 == 0 {
		t.Fatalf("before detaching: %d and %d of %d datagrams; want both sockets to get some", queued1, queued2, n)
	}

	sendFromFreshPorts(t, addr, n) // queued on the old sockets when they are detached
	detached, err := detachListeners([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, uint16(addr.Port))
	if err != nil || detached != 2 {
		t.Fatalf("detachListeners = %d, %v; want 2 sockets", detached, err)
	}
	successor := listenReusePort(t, addr.String()) // the other instance's listener, joining after the detach
	sendFromFreshPorts(t, addr, n)

	if got := drain(successor); got != n {
		t.Errorf("successor got %d of the %d datagrams sent after the detach, want all", got, n)
	}
	if got := drain(old1) + drain(old2); got != n {
		t.Errorf("detached sockets still held %d datagrams queued before the detach, want %d", got, n)
	}
}

func TestDetachListenersLeavesOtherSocketsAlone(t *testing.T) {
	other := listenReusePort(t, "127.0.0.1:0")
	port := uint16(other.LocalAddr().(*net.UDPAddr).Port)
	detached, err := detachListeners([]netip.Addr{netip.MustParseAddr("192.0.2.1")}, port)
	if err != nil || detached != 0 {
		t.Fatalf("detachListeners for another address = %d, %v; want 0", detached, err)
	}
	sendFromFreshPorts(t, other.LocalAddr().(*net.UDPAddr), 4)
	if got := drain(other); got != 4 {
		t.Fatalf("untouched socket got %d of 4 datagrams", got)
	}
}

const soReusePort = 0xf // SO_REUSEPORT on Linux; the syscall package does not name it
