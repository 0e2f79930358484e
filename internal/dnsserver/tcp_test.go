package dnsserver

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/connlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
)

// tcpQuery asks name over c, an open connection, and returns the answer's first A record ("" if none).
func tcpQuery(c *dns.Conn, name string) (string, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if err := c.WriteMsg(m); err != nil {
		return "", err
	}
	r, err := c.ReadMsg()
	if err != nil {
		return "", err
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), nil
		}
	}
	return "", nil
}

// dialTCP connects to addr from 127.0.0.1, or from src when given (another loopback address: another source).
func dialTCP(t *testing.T, addr string, src ...string) *dns.Conn {
	t.Helper()
	d := &net.Dialer{Timeout: 2 * time.Second}
	if len(src) > 0 {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src[0])}
	}
	nc, err := d.Dial("tcp", addr)
	c := &dns.Conn{Conn: nc}
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startCached starts a Server with opts on one block on 127.0.0.1, on one port for UDP and TCP (the fast path
// serves TCP on the address it serves UDP on), with a cache and forwarding to upstream; it is stopped when the
// test ends.
func startCached(t *testing.T, opts Options, upstream string) (s *Server, port, corefile string) {
	t.Helper()
	s, err := New(zaptest.NewLogger(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	port = freeUDPPort(t)
	corefile = fmt.Sprintf(".:%s {\n  bind 127.0.0.1\n  cache 30\n  forward . %s\n}\n", port, upstream)
	if err := s.Start([]byte(corefile), "Corefile"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s, port, corefile
}

// TestTCPAcceptedWithinTheCap: with the fast path, TCP on CoreDNS's address is accepted by the fast path, which
// resets a source's connection beyond the per-source cap before it is served; TCP is answered after reloads
// (one that changes the chain, one that fails, one whose block the fast path cannot serve, which leaves TCP to
// CoreDNS's listener, and back), and nothing listens after Stop.
func TestTCPAcceptedWithinTheCap(t *testing.T) {
	up := startUpstream(t)
	const perSource = 3
	s, port, corefile := startCached(t, Options{FastPath: fastpath.NewMetrics(),
		TCPLimits: connlimit.Limits{PerSource: perSource, Total: 10}}, up.Addr)
	addr := net.JoinHostPort("127.0.0.1", port)

	const capped = "127.0.0.2" // the source that fills its places; the other steps ask from 127.0.0.1
	t.Run("the cap holds at accept", func(t *testing.T) {
		var held []*dns.Conn
		for i := range perSource {
			c := dialTCP(t, addr, capped)
			if got, err := tcpQuery(c, "held.example"); err != nil || got != "192.0.2.1" {
				t.Fatalf("connection %d: %q, %v", i, got, err)
			}
			held = append(held, c)
		}
		// Reset at accept: the reset may reach the client before its connect returns.
		d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(capped)}}
		if nc, err := d.Dial("tcp", addr); err == nil {
			over := &dns.Conn{Conn: nc}
			if got, err := tcpQuery(over, "held.example"); err == nil {
				t.Errorf("connection %d of one source answered (%q), want it reset at accept", perSource+1, got)
			}
			nc.Close()
		}
		held[0].Close()
		deadline := time.Now().Add(2 * time.Second)
		for {
			var got string
			nc, err := d.Dial("tcp", addr)
			if err == nil {
				got, err = tcpQuery(&dns.Conn{Conn: nc}, "held.example")
				if err == nil && got == "192.0.2.1" {
					held = append(held, &dns.Conn{Conn: nc})
					break
				}
				nc.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("no place given back 2 s after a connection closed: %q, %v", got, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, c := range held {
			c.Close()
		}
	})

	answers := func(t *testing.T, name, want string) {
		t.Helper()
		c := dialTCP(t, addr)
		if got, err := tcpQuery(c, name); err != nil || got != want {
			t.Errorf("over tcp, %s: %q, %v; want %s", name, got, err, want)
		}
		c.Close()
	}
	t.Run("reloads", func(t *testing.T) {
		next := strings.Replace(corefile, "  cache 30\n", "  cache 30\n  template IN A reloaded.example {\n    answer \"{{ .Name }} 60 IN A 198.51.100.7\"\n  }\n", 1)
		if _, err := s.Reload([]byte(next)); err != nil {
			t.Fatal(err)
		}
		answers(t, "reloaded.example", "198.51.100.7")
		if _, err := s.Reload([]byte(".:" + port + " {\n  bind 127.0.0.1\n  forward\n}\n")); err == nil {
			t.Fatal("a bad reload succeeded")
		}
		answers(t, "reloaded.example", "198.51.100.7")
		// No cache: the fast path steps aside, and CoreDNS accepts on its own socket again.
		uncached := strings.Replace(next, "  cache 30\n", "", 1)
		if _, err := s.Reload([]byte(uncached)); err != nil {
			t.Fatal(err)
		}
		answers(t, "reloaded.example", "198.51.100.7")
		answers(t, "other.example", "192.0.2.1")
		if _, err := s.Reload([]byte(next)); err != nil {
			t.Fatal(err)
		}
		answers(t, "reloaded.example", "198.51.100.7")
	})

	t.Run("stop", func(t *testing.T) {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Error("a TCP connection after Stop was accepted")
		}
	})
}

// TestStopAtOnceLeavesNothingListening: a Stop just after a start, before caddy's goroutines have begun
// serving, leaves nothing listening (CoreDNS's Stop runs once and skips a server whose Serve had not begun,
// which then served on: CI met a TCP connection accepted after Stop). The agent's configuration: the fast path
// on, a cache in the block (the fast path's start waits for CoreDNS's UDP servers to begin, which is what
// keeps UDP from the same fate; without it, UDP served on after Stop in most runs of this test here). Many
// rounds, since whether one meets that moment is up to the scheduler: beside stress-ng --cpu 2, the Stop
// before this fix left a TCP listener in more than a third of this test's runs.
func TestStopAtOnceLeavesNothingListening(t *testing.T) {
	up := startUpstream(t)
	for round := range 40 {
		s, port, _ := startCached(t, Options{FastPath: fastpath.NewMetrics()}, up.Addr)
		addr := net.JoinHostPort("127.0.0.1", port)
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("round %d: a TCP connection after Stop was accepted", round)
		}
		m := new(dns.Msg)
		m.SetQuestion("after.stop.example.", dns.TypeA)
		if r, _, err := (&dns.Client{Timeout: 200 * time.Millisecond}).Exchange(m, addr); err == nil {
			t.Fatalf("round %d: a UDP query after Stop was answered (rcode %d)", round, r.Rcode)
		}
	}
}
