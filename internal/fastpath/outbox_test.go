package fastpath

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Answers written by many workers at once each reach their own client, whole, from the listener's address, and
// they leave in fewer system calls than answers: the workers runnable together share a sendmmsg.
func TestOutboxSendsEachAnswerToItsClient(t *testing.T) {
	for _, network := range []struct{ name, addr string }{{"udp4", "127.0.0.1:0"}, {"udp6", "[::1]:0"}} {
		t.Run(network.name, func(t *testing.T) {
			out, o := listenOutbox(t, network.name, network.addr)

			const clients = 3*batchSize + 5 // more than one sendmmsg's worth
			conns := make([]*net.UDPConn, clients)
			answers := make([][]byte, clients)
			for i := range conns {
				c, err := net.ListenPacket(network.name, network.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				conns[i] = c.(*net.UDPConn)
				// Sizes from a bare header to a full EDNS answer, each answer its own bytes.
				answers[i] = bytes.Repeat([]byte{byte(i)}, 12+(i*97)%1220)
				copy(answers[i], fmt.Sprintf("answer %d", i))
			}

			// One P, as the bench's agent has: every worker is runnable when the first one sends.
			procs := runtime.GOMAXPROCS(1)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, c := range conns {
				wg.Go(func() {
					<-start
					o.write(answers[i], c.LocalAddr().(*net.UDPAddr))
				})
			}
			close(start)
			wg.Wait()
			runtime.GOMAXPROCS(procs)

			buf := make([]byte, 2048)
			for i, c := range conns {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, from, err := c.ReadFromUDP(buf)
				if err != nil {
					t.Fatalf("client %d: %v", i, err)
				}
				if !bytes.Equal(buf[:n], answers[i]) {
					t.Errorf("client %d got %d bytes starting %q, want its own %d", i, n, buf[:min(n, 12)], len(answers[i]))
				}
				if from.String() != out.LocalAddr().String() {
					t.Errorf("client %d: answer from %v, want the listener's %v", i, from, out.LocalAddr())
				}
			}
			calls := o.calls.Load()
			t.Logf("%d answers, %d sendmmsg calls", clients, calls)
			if calls == 0 || calls > clients/4 {
				t.Errorf("%d answers took %d sendmmsg calls, want at least one and at most %d", clients, calls, clients/4)
			}
		})
	}
}

// listenOutbox opens a listener's socket on addr (SO_REUSEPORT, as the listener's are) and an outbox sending
// from it; it skips the test when the family has no loopback address.
func listenOutbox(t *testing.T, network, addr string) (*net.UDPConn, *outbox) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr)
	if err != nil {
		t.Skipf("no %s loopback: %v", network, err)
	}
	out := pc.(*net.UDPConn)
	t.Cleanup(func() { out.Close() })
	send, err := sendSocket(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(send) })
	return out, newOutbox(out, send)
}

// An answer written alone, with nothing else runnable, leaves at once, in one call.
func TestOutboxSendsALoneAnswerAtOnce(t *testing.T) {
	_, o := listenOutbox(t, "udp4", "127.0.0.1:0")
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		o.write([]byte(fmt.Sprintf("lone answer %d", i)), c.LocalAddr().(*net.UDPAddr))
		if calls := o.calls.Load(); calls != uint64(i+1) {
			t.Fatalf("after %d answers written one after the other, %d sendmmsg calls", i+1, calls)
		}
		buf := make([]byte, 64)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := c.ReadFrom(buf)
		if err != nil || string(buf[:n]) != fmt.Sprintf("lone answer %d", i) {
			t.Fatalf("answer %d: %q, %v", i, buf[:n], err)
		}
	}
	o.write(nil, c.LocalAddr().(*net.UDPAddr))
	if calls := o.calls.Load(); calls != 3 {
		t.Errorf("an empty answer made a call (%d calls)", calls)
	}
}

// A client's address becomes the sockaddr the kernel takes: the port in network byte order, an IPv6 zone by
// number or by interface name.
func TestRawSockaddr(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo: %v", err)
	}
	for _, tc := range []struct {
		addr    *net.UDPAddr
		family  uint16
		nlen    uint32
		scope   uint32
		ipBytes []byte
	}{
		{&net.UDPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 0x1234}, unix.AF_INET, unix.SizeofSockaddrInet4, 0, []byte{10, 1, 2, 3}},
		{&net.UDPAddr{IP: net.ParseIP("fd00::53"), Port: 0x1234}, unix.AF_INET6, unix.SizeofSockaddrInet6, 0, net.ParseIP("fd00::53")},
		{&net.UDPAddr{IP: net.ParseIP("fe80::1"), Port: 0x1234, Zone: "7"}, unix.AF_INET6, unix.SizeofSockaddrInet6, 7, net.ParseIP("fe80::1")},
		{&net.UDPAddr{IP: net.ParseIP("fe80::1"), Port: 0x1234, Zone: "lo"}, unix.AF_INET6, unix.SizeofSockaddrInet6, uint32(lo.Index), net.ParseIP("fe80::1")},
	} {
		sa, nlen := rawSockaddr(tc.addr)
		if sa.Family != tc.family || nlen != tc.nlen {
			t.Errorf("%v: family %d length %d, want %d and %d", tc.addr, sa.Family, nlen, tc.family, tc.nlen)
		}
		if port := (*[2]byte)(unsafe.Pointer(&sa.Port)); port[0] != 0x12 || port[1] != 0x34 {
			t.Errorf("%v: port bytes %x, want 12 34", tc.addr, port[:])
		}
		var ip []byte
		if tc.family == unix.AF_INET {
			ip = (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa)).Addr[:]
		} else {
			ip = sa.Addr[:]
			if sa.Scope_id != tc.scope {
				t.Errorf("%v: scope %d, want %d", tc.addr, sa.Scope_id, tc.scope)
			}
		}
		if !bytes.Equal(ip, tc.ipBytes) {
			t.Errorf("%v: address bytes %v, want %v", tc.addr, ip, tc.ipBytes)
		}
	}
}
