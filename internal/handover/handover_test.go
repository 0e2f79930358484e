package handover

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// Conventions: every socket is on 127.0.0.1 with a kernel-chosen port; datagrams come from fresh source ports so
// that the group's hash spreads them.

func listen(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return control(c, func(fd int) error { return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1) })
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.(*net.UDPConn)
}

func send(t *testing.T, to *net.UDPAddr, n int) {
	t.Helper()
	for range n {
		c, err := net.DialUDP("udp", nil, to)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("q"))
		c.Close()
	}
}

func queued(c *net.UDPConn) int {
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

func raw(t *testing.T, c *net.UDPConn) syscall.RawConn {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestDetachAttach(t *testing.T) {
	// a, the one detached and attached again, is bound to its port by number, as CoreDNS's listeners are.
	b := listen(t, "127.0.0.1:0")
	to := b.LocalAddr().(*net.UDPAddr)
	a := listen(t, to.String())
	const n = 64

	send(t, to, n) // queued on a when it is detached
	if err := Detach(raw(t, a)); err != nil || !Detached(raw(t, a)) || Detached(raw(t, b)) {
		t.Fatalf("Detach = %v, Detached(a) = %v, Detached(b) = %v; want a alone detached", err, Detached(raw(t, a)), Detached(raw(t, b)))
	}
	send(t, to, n)
	gotA, gotB := queued(a), queued(b)
	if gotB < n || gotA+gotB != 2*n {
		t.Errorf("a read %d and b %d of %d+%d datagrams; want every one sent after the detach on b, none lost", gotA, gotB, n, n)
	}

	if err := Attach(raw(t, a)); err != nil || Detached(raw(t, a)) {
		t.Fatalf("Attach = %v, Detached(a) = %v", err, Detached(raw(t, a)))
	}
	b.Close() // as the fast path closes its sockets once CoreDNS's is attached again
	send(t, to, n)
	if got := queued(a); got != n {
		t.Errorf("after Attach and b closing, a read %d of %d", got, n)
	}
}

func TestDetachBoundHandsNewQueriesToTheOtherInstance(t *testing.T) {
	old1 := listen(t, "127.0.0.1:0")
	addr := old1.LocalAddr().(*net.UDPAddr)
	old2 := listen(t, addr.String())
	const n = 64

	send(t, addr, n)
	queued1, queued2 := queued(old1), queued(old2)
	if queued1+queued2 != n || queued1 == 0 || queued2 == 0 {
		t.Fatalf("before detaching: %d and %d of %d datagrams; want both sockets to get some", queued1, queued2, n)
	}

	send(t, addr, n) // queued on the old sockets when they are detached
	detached, err := DetachBound([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, uint16(addr.Port))
	if err != nil || detached != 2 {
		t.Fatalf("DetachBound = %d, %v; want 2 sockets", detached, err)
	}
	successor := listen(t, addr.String()) // the other instance's listener, joining after the detach
	send(t, addr, n)

	if got := queued(successor); got != n {
		t.Errorf("successor got %d of the %d datagrams sent after the detach, want all", got, n)
	}
	if got := queued(old1) + queued(old2); got != n {
		t.Errorf("detached sockets still held %d datagrams queued before the detach, want %d", got, n)
	}
}

func TestDetachBoundLeavesOtherSocketsAlone(t *testing.T) {
	other := listen(t, "127.0.0.1:0")
	port := uint16(other.LocalAddr().(*net.UDPAddr).Port)
	detached, err := DetachBound([]netip.Addr{netip.MustParseAddr("192.0.2.1")}, port)
	if err != nil || detached != 0 {
		t.Fatalf("DetachBound for another address = %d, %v; want 0", detached, err)
	}
	send(t, other.LocalAddr().(*net.UDPAddr), 4)
	if got := queued(other); got != 4 {
		t.Fatalf("untouched socket got %d of 4 datagrams", got)
	}
}

// TestDetachAddrsSilencesASocketBeingServed: a socket that something keeps reading, as a CoreDNS server that
// began after its instance stopped, answers nothing once DetachAddrs has detached it: a query to its address is
// refused (nothing else listens there). A socket bound to the wildcard address too.
func TestDetachAddrsSilencesASocketBeingServed(t *testing.T) {
	for _, bind := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		t.Run(bind, func(t *testing.T) {
			srv := listen(t, bind)
			go func() { // echoes until the socket closes
				buf := make([]byte, 512)
				for {
					n, from, err := srv.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					srv.WriteToUDPAddrPort(buf[:n], from)
				}
			}()
			bound := srv.LocalAddr().(*net.UDPAddr).AddrPort()
			to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), bound.Port()))
			if err := echo(to); err != nil {
				t.Fatalf("before detaching: %v", err)
			}
			other := listen(t, "127.0.0.1:0") // another socket of the process, on another address: left alone
			n, err := DetachAddrs([]netip.AddrPort{netip.AddrPortFrom(bound.Addr().Unmap(), bound.Port())})
			if err != nil || n != 1 {
				t.Fatalf("DetachAddrs = %d, %v; want 1 socket", n, err)
			}
			if err := echo(to); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("after detaching, a query to %s: %v; want connection refused", to, err)
			}
			if Detached(raw(t, other)) {
				t.Error("a socket on another address was detached")
			}
		})
	}
}

// echo sends one datagram to to and waits (bounded) for it to come back.
func echo(to *net.UDPAddr) error {
	c, err := net.DialUDP("udp", nil, to)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("q")); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	_, err = c.Read(buf)
	return err
}
