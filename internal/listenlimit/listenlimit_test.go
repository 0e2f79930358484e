package listenlimit

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Conventions: the server listens on 127.0.0.1; each "source" is another loopback address (127.0.0.N), which
// Linux routes to lo, so every client below is a real TCP connection from a distinct source. The server writes
// "ok" on every connection it admits and then holds it open, as an idle client's connection is held until its
// timeout; a client that reads "ok" was admitted, one that reads EOF or a reset was refused.

func serve(t *testing.T, l Limits) string { return serveWith(t, l, true) }

// serveWith is serve; a server that does not read leaves every admitted connection open until the test ends,
// as a starved server's goroutines leave a closed client's until they run.
func serveWith(t *testing.T, l Limits, read bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewPool(l).wrap(ln)
	done := make(chan struct{})
	t.Cleanup(func() { lim.Close(); close(done) })
	go func() {
		for {
			c, err := lim.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("ok"))
				if !read {
					<-done
					return
				}
				io.Copy(io.Discard, c) // until the client or a newcomer's admission closes it
			}()
		}
	}()
	return ln.Addr().String()
}

// dial connects from 127.0.0.src and reports whether the server admitted the connection.
func dial(t *testing.T, addr string, src int) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(src))}, Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil, false // reset while connecting: refused as early as can be
	}
	if err != nil {
		t.Fatalf("dial from 127.0.0.%d: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2)
	_, err = io.ReadFull(c, buf)
	return c, err == nil && string(buf) == "ok"
}

// stillOpen reports whether the server has not closed c (a read times out rather than ending).
func stillOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestPerSource: one source holding its share of idle connections gets no more, and another source is served
// at once. netutil.LimitListener, the bound before, left the second source in the accept queue behind the first.
func TestPerSource(t *testing.T) {
	addr := serve(t, Limits{PerSource: 3, Total: 8})
	for i := range 10 {
		if _, ok := dial(t, addr, 2); ok != (i < 3) {
			t.Fatalf("connection %d from 127.0.0.2: admitted %v, want %v (3 per source)", i+1, ok, i < 3)
		}
	}
	if _, ok := dial(t, addr, 3); !ok {
		t.Fatal("127.0.0.3 refused while 127.0.0.2 holds only its own share")
	}
}

// TestNewcomerTakesBusiestPlace: with the total reached by sources holding their share, a source with nothing
// open is admitted in place of the busiest source's oldest connection; and when every source holds one, nobody
// is fairer off by a swap, so the newcomer is refused and everyone keeps theirs.
func TestNewcomerTakesBusiestPlace(t *testing.T) {
	addr := serve(t, Limits{PerSource: 2, Total: 4})
	var held []net.Conn
	for _, src := range []int{2, 2, 3, 3} {
		c, ok := dial(t, addr, src)
		if !ok {
			t.Fatalf("127.0.0.%d refused below the bounds", src)
		}
		held = append(held, c)
	}
	if _, ok := dial(t, addr, 4); !ok {
		t.Fatal("127.0.0.4 refused although 127.0.0.2 and 127.0.0.3 hold two each")
	}
	closed := 0
	for _, c := range held {
		if !stillOpen(c) {
			closed++
		}
	}
	if closed != 1 {
		t.Fatalf("%d held connections were closed for the newcomer, want 1 (the busiest source's oldest)", closed)
	}
	if !stillOpen(held[1]) && !stillOpen(held[3]) {
		t.Fatal("a source's newest connection was taken instead of its oldest")
	}

	// Now 2 holds one (or 3 does), the other two, 4 one: one more newcomer takes the place of the source with two.
	if _, ok := dial(t, addr, 5); !ok {
		t.Fatal("127.0.0.5 refused although a source holds two")
	}
	// Every source holds one: no swap is fairer.
	if _, ok := dial(t, addr, 6); ok {
		t.Fatal("127.0.0.6 admitted with four sources holding one each: someone lost their only connection")
	}
}

// TestCloseGivesPlaceBack: a connection the client closes no longer counts.
func TestCloseGivesPlaceBack(t *testing.T) {
	addr := serve(t, Limits{PerSource: 1, Total: 1})
	c, ok := dial(t, addr, 2)
	if !ok {
		t.Fatal("first connection refused")
	}
	if _, ok := dial(t, addr, 2); ok {
		t.Fatal("second connection from the same source admitted over PerSource 1")
	}
	c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, ok := dial(t, addr, 2); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the place of a closed connection was not given back within 2 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPeerClosedGivesPlaceBack: a connection its client has closed no longer counts against the source's share,
// though the server has not yet closed its side (here never: it does not read). A scraper that closes and dials
// again at once was reset while a starved agent had yet to read the end of its last connection.
func TestPeerClosedGivesPlaceBack(t *testing.T) {
	addr := serveWith(t, Limits{PerSource: 2, Total: 8}, false)
	first, ok := dial(t, addr, 2)
	if !ok {
		t.Fatal("first connection refused")
	}
	if _, ok := dial(t, addr, 2); !ok {
		t.Fatal("second connection refused below PerSource 2")
	}
	if _, ok := dial(t, addr, 2); ok {
		t.Fatal("third connection admitted while the source holds two")
	}
	first.Close()
	testenv.Eventually(t, 10*time.Second, "a connection from 127.0.0.2 admitted after it closed one", func() bool {
		_, ok := dial(t, addr, 2)
		return ok
	})
	// The source holds two again (the second and the newest): the closed one gave back one place, not more.
	if _, ok := dial(t, addr, 2); ok {
		t.Fatal("a connection admitted while the source holds two open ones")
	}
}

// TestAtShareLookedOverOncePerRescan: a source's flood at its share does not cost a pass over its connections
// per newcomer: one per rescan, however many come meanwhile.
func TestAtShareLookedOverOncePerRescan(t *testing.T) {
	p := NewPool(Limits{PerSource: 2, Total: 1000})
	now := time.Unix(1e9, 0)
	p.now = func() time.Time { return now }
	pipe := func() net.Conn { // net.Pipe's connections all share one source (no IP address)
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a
	}
	for range 2 {
		if p.admit(pipe()) == nil {
			t.Fatal("refused below the share")
		}
	}
	for range 100 {
		if p.admit(pipe()) != nil {
			t.Fatal("admitted over the share")
		}
	}
	if p.scans != 1 {
		t.Fatalf("%d passes over the source's connections for 100 newcomers in one instant, want 1", p.scans)
	}
	now = now.Add(rescan)
	p.admit(pipe())
	if p.scans != 2 {
		t.Fatalf("%d passes after rescan had gone by, want 2", p.scans)
	}
}

// slowClose is a connection whose Close lasts until release is closed, as a Go socket's lasts until the
// goroutine blocked reading it has run: on a starved machine, over a second.
type slowClose struct {
	net.Conn
	entered, release chan struct{}
}

func (c *slowClose) Close() error {
	close(c.entered)
	<-c.release
	return c.Conn.Close()
}

// A place comes back once the socket is gone, not when its Close begins: a newcomer from the same source
// meanwhile would be one over the bound.
func TestPlaceComesBackOnlyOnceTheSocketIsGone(t *testing.T) {
	p := NewPool(Limits{PerSource: 1, Total: 4})
	pipe := func() net.Conn { // net.Pipe's connections all share one source (no IP address)
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a
	}
	first := &slowClose{Conn: pipe(), entered: make(chan struct{}), release: make(chan struct{})}
	ac := p.admit(first)
	if ac == nil {
		t.Fatal("first connection refused")
	}
	closed := make(chan error)
	go func() { closed <- ac.Close() }()
	<-first.entered
	if p.admit(pipe()) != nil {
		t.Error("a newcomer from the same source was admitted while the first connection's socket was still open")
	}
	close(first.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if p.admit(pipe()) == nil {
		t.Error("the place was not given back once the first connection's socket was closed")
	}
}
