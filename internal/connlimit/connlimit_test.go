package connlimit

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestChoose(t *testing.T) {
	l := netip.MustParseAddrPort("169.254.20.10:53")
	c := func(src string, port uint16, idle time.Duration) conn {
		return conn{local: l, remote: netip.AddrPortFrom(netip.MustParseAddr(src), port), idle: idle}
	}
	var conns []conn
	for i := range 5 {
		conns = append(conns, c("192.0.2.2", uint16(1000+i), time.Duration(i)*time.Second)) // the flooder
	}
	conns = append(conns, c("198.18.0.2", 1, 9*time.Second), c("198.18.0.2", 2, 0), c("203.0.113.9", 1, 0))

	// Per source 3: the flooder's two idlest go; the others keep theirs however idle.
	got := choose(conns, Limits{PerSource: 3, Total: 100})
	if len(got) != 2 || got[0].idle < 3*time.Second || got[1].idle < 3*time.Second || got[0].remote.Addr() != conns[0].remote.Addr() {
		t.Errorf("per source 3: closed %v; want the flooder's two idlest", got)
	}
	// Total 4 as well: after the per-source cut (3 + 2 + 1 held), the source holding the most loses its idlest
	// until 4 remain: the flooder's, down to 2 (equal with the second source), then one of those two.
	got = choose(conns, Limits{PerSource: 3, Total: 4})
	if len(got) != 4 {
		t.Fatalf("total 4: closed %d, want 4: %v", len(got), got)
	}
	for _, g := range got {
		if g.remote.Addr().String() == "203.0.113.9" {
			t.Errorf("total 4: closed the connection of the source holding one: %v", got)
		}
	}
	if got := choose(conns, Limits{PerSource: 10, Total: 10}); len(got) != 0 {
		t.Errorf("within the caps: closed %v", got)
	}

	// A source at its cap of accepted connections, idle for seconds, and one more still queued, just arrived:
	// the queued one goes, as a reset at accept would have it.
	var capped []conn
	for i := range 3 {
		a := c("192.0.2.7", uint16(2000+i), 5*time.Second)
		a.inode = uint32(100 + i)
		capped = append(capped, a)
	}
	capped = append(capped, c("192.0.2.7", 2003, 0))
	if got := choose(capped, Limits{PerSource: 3, Total: 100}); len(got) != 1 || got[0].inode != 0 {
		t.Errorf("at the cap with one queued: closed %v; want the queued one", got)
	}
}

// Real sockets on loopback: a pass closes the connections over the cap on a watched listener, and only those,
// by SOCK_DESTROY and by the fallback through the descriptor; the client sees them end.
func TestPassClosesOverTheCap(t *testing.T) {
	for _, noDestroy := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var open atomic.Int64
		go serve(ln, &open)
		var clients []net.Conn
		for range 5 {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			clients = append(clients, c)
		}
		testenv.Eventually(t, 5*time.Second, "the server to accept all 5", func() bool { return open.Load() == 5 })
		l := &Limiter{log: zaptest.NewLogger(t), lim: Limits{PerSource: 3, Total: 10}, noDestroy: noDestroy}
		l.Watch([]netip.AddrPort{ln.Addr().(*net.TCPAddr).AddrPort()})
		if n, _ := l.pass(); n != 2 {
			t.Errorf("destroy %v: pass closed %d, want 2 of 5 over a cap of 3", !noDestroy, n)
		}
		ended := 0
		for _, c := range clients {
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					ended++
				}
			}
		}
		if ended != 2 {
			t.Errorf("destroy %v: %d client connections ended, want 2", !noDestroy, ended)
		}
		testenv.Eventually(t, 5*time.Second, fmt.Sprintf("destroy %v: the server to hold 3", !noDestroy), func() bool { return open.Load() == 3 })
		if n, _ := l.pass(); n != 0 {
			t.Errorf("destroy %v: second pass closed %d, want 0", !noDestroy, n)
		}
	}
}

// serve accepts on ln until it is closed, reading each connection until it ends, as CoreDNS does, and counts
// the connections it holds.
func serve(ln net.Listener, open *atomic.Int64) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		open.Add(1)
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := c.Read(buf); err != nil {
					c.Close()
					open.Add(-1)
					return
				}
			}
		}()
	}
}

// settle waits (bounded) until the limiter has not run a pass for 300 ms, and returns how many it ran.
func settle(t *testing.T, l *Limiter) int64 {
	t.Helper()
	n, since := l.passes.Load(), time.Now()
	testenv.Eventually(t, 10*time.Second, "the limiter to stop running passes", func() bool {
		if m := l.passes.Load(); m != n {
			n, since = m, time.Now()
		}
		return time.Since(since) >= 300*time.Millisecond
	})
	return n
}

// A running Limiter on a real listener: connections over the cap are closed without any pass on a timer
// (the listener's signal wakes it), including after the listener is handed on the way caddy's reload does
// (File, then FileListener), and an idle limiter runs no pass at all.
func TestWakesOnConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	go serve(ln, &open)
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	const perSource = 3
	l := Start(zaptest.NewLogger(t), Limits{PerSource: perSource, Total: 10})
	defer l.Stop()
	l.Watch([]netip.AddrPort{addr})

	flood := func(what string) {
		t.Helper()
		var clients []net.Conn
		defer func() {
			for _, c := range clients {
				c.Close()
			}
		}()
		for range 30 {
			c, err := net.Dial("tcp", addr.String())
			if errors.Is(err, syscall.ECONNRESET) {
				// The pass reset it while still queued, before the handshake's end reached the dialer: the
				// cap at work on a source dialing faster than the pass runs.
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%s: the server to hold the cap of %d connections of one source", what, perSource),
			func() bool { return open.Load() == perSource })
		// Idle: no pass at all. Polling every 100 ms, as before, ran 20 in these 2 s.
		before := settle(t, l)
		time.Sleep(2 * time.Second)
		if n := l.passes.Load() - before; n > 0 {
			t.Errorf("%s: %d passes in 2 s without a connection", what, n)
		}
	}
	settle(t, l)
	flood("listener")
	testenv.Eventually(t, 10*time.Second, "every connection to end after the clients closed", func() bool { return open.Load() == 0 })

	// caddy's reload: the new server's listener is a copy of the old one's descriptor, the old one closed.
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	defer ln2.Close()
	go serve(ln2, &open)
	l.Watch([]netip.AddrPort{addr})
	flood("listener handed on")
}

// The kernel contract the limiter relies on to know that connections are not yet among CoreDNS's descriptors:
// a listener's TCP_INFO counts its accept queue, on the MPTCP listener Go opens as on a plain TCP one.
func TestQueuedCountsTheAcceptQueue(t *testing.T) {
	for _, mptcp := range []bool{false, true} {
		var lc net.ListenConfig
		lc.SetMultipathTCP(mptcp)
		ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addr := ln.Addr().(*net.TCPAddr).AddrPort()
		a, missing, err := arm(map[netip.AddrPort]bool{addr: true})
		if err != nil || len(missing) > 0 || len(a) != 1 {
			t.Fatalf("mptcp %v: arm: %v, missing %v, %d armed", mptcp, err, missing, len(a))
		}
		for range 2 {
			c, err := net.Dial("tcp", addr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		// The client's connect returns when its SYN-ACK arrives; the server's side joins the queue with the
		// final ACK, just after.
		var n int
		testenv.Eventually(t, 5*time.Second, "2 connections queued", func() bool { n, err = a[0].queued(); return err != nil || n == 2 })
		if err != nil || n != 2 {
			t.Errorf("mptcp %v: queued %d, %v; want 2", mptcp, n, err)
		}
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if n, err := a[0].queued(); err != nil || n != 1 {
			t.Errorf("mptcp %v: after one accept, queued %d, %v; want 1", mptcp, n, err)
		}
		ln.Close()
		if _, err := a[0].queued(); !errors.Is(err, errNotListening) {
			t.Errorf("mptcp %v: after close: %v, want errNotListening", mptcp, err)
		}
	}
}

// Connections still in the listener's queue count and are reset there, before the server accepts them.
func TestPassClosesQueued(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := &Limiter{log: zaptest.NewLogger(t), lim: Limits{PerSource: 3, Total: 10}}
	l.Watch([]netip.AddrPort{ln.Addr().(*net.TCPAddr).AddrPort()})
	for range 5 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	testenv.Eventually(t, 5*time.Second, "5 connections queued", func() bool { n, err := l.armed[0].queued(); return err != nil || n == 5 })
	if n, _ := l.pass(); n != 2 {
		t.Errorf("pass closed %d queued connections, want 2 of 5 over a cap of 3", n)
	}
	conns, err := held(l.listeners)
	if err != nil || len(conns) != 3 {
		t.Errorf("after the pass %d established, %v; want 3", len(conns), err)
	}
}

// A source at its cap with one more connection queued: the pass resets the queued newcomer, as the fast
// path's listeners do at accept, and not the accepted connections, idle for longer (the fast path's
// listener may be about to accept the newcomer, and with an accepted one closed in its place it would be let
// in: issue 39's cap, broken by the net under it; CI met this in internal/dnsserver TestTCPAcceptedWithinTheCap).
func TestPassClosesTheNewcomer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// A query's worth of data, then idle: the newcomer below has received nothing since after this.
		if _, err := c.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, c)
	}
	// The accepted ones idle longer than the newcomer (more so on a slower machine); the old choice, the
	// idlest, closed one of them in 1 of 3 runs here (a queued socket's idle is not always since its arrival).
	time.Sleep(50 * time.Millisecond)
	newcomer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer newcomer.Close()

	l := &Limiter{log: zaptest.NewLogger(t), lim: Limits{PerSource: 3, Total: 10}}
	l.Watch([]netip.AddrPort{ln.Addr().(*net.TCPAddr).AddrPort()})
	testenv.Eventually(t, 5*time.Second, "the newcomer queued", func() bool { n, err := l.armed[0].queued(); return err != nil || n == 1 })
	if n, _ := l.pass(); n != 1 {
		t.Fatalf("pass closed %d, want 1 of 4 over a cap of 3", n)
	}
	newcomer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := newcomer.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the queued newcomer: read %v, want it reset", err)
	}
	for i, c := range accepted {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("accepted connection %d: read %v, want it still open (a timeout)", i, err)
		}
	}
}

// ShutListeners ends an accept blocked on a listener of the addresses it is given, nothing listens there after,
// and a listener on another address goes on.
func TestShutListeners(t *testing.T) {
	shut, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer shut.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := shut.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	n, err := ShutListeners([]netip.AddrPort{shut.Addr().(*net.TCPAddr).AddrPort()})
	if err != nil || n != 1 {
		t.Fatalf("ShutListeners: %d shut, %v; want 1", n, err)
	}
	select {
	case err := <-accepted:
		if err == nil {
			t.Error("the blocked accept returned a connection, want an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked accept still waits 10 s after its listener was shut")
	}
	if c, err := net.DialTimeout("tcp", shut.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("a connection to the shut listener's address was accepted")
	}
	c, err := net.DialTimeout("tcp", other.Addr().String(), time.Second)
	if err != nil {
		t.Fatalf("the other listener: %v", err)
	}
	c.Close()
}
