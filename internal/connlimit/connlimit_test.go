package connlimit

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
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
}

// Real sockets on loopback: a pass closes the connections over the cap on a watched listener, and only those;
// the client sees them end.
func TestPassClosesOverTheCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go func() { // as CoreDNS does: read until the connection ends, then close it
				buf := make([]byte, 64)
				for {
					if _, err := c.Read(buf); err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	var clients []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		<-accepted
	}
	l := &Limiter{log: zaptest.NewLogger(t), lim: Limits{PerSource: 3, Total: 10}}
	l.Watch([]netip.AddrPort{ln.Addr().(*net.TCPAddr).AddrPort()})
	if n := l.pass(); n != 2 {
		t.Errorf("pass closed %d, want 2 of 5 over a cap of 3", n)
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
		t.Errorf("%d client connections ended, want 2", ended)
	}
	if n := l.pass(); n != 0 {
		t.Errorf("second pass closed %d, want 0", n)
	}
}
