package upstream

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// countingListener counts the TCP connections accepted, and those the client closed (the server's read of
// them ended), as the upstream sees them.
type countingListener struct {
	net.Listener
	accepted, closed atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.once.Do(func() { c.l.closed.Add(1) })
	}
	return n, err
}

// serveCounting serves h over TCP on a loopback port, counting connections.
func serveCounting(t *testing.T, h dns.Handler) *countingListener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	s := &dns.Server{Listener: cl, Handler: h, MaxTCPQueries: -1}
	go func() { _ = s.ActivateAndServe() }()
	t.Cleanup(func() { _ = s.Shutdown(); ln.Close() })
	return cl
}

// goroutinesSettle waits (bounded) until the process runs at most want goroutines and returns the count seen.
func goroutinesSettle(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleCostsNothing: a transport that is asked nothing runs nothing (no goroutine, no ticker); once asked,
// its connections close after Expire without a query, and with them every goroutine it started. Nothing is
// renewed while it is idle.
func TestIdleCostsNothing(t *testing.T) {
	var seen atomic.Int64
	cl := serveCounting(t, answerer(0, &seen))
	base := runtime.NumGoroutine()
	u := New(cl.Addr().String(), Options{Expire: 300 * time.Millisecond, MaxAge: 100 * time.Millisecond})
	defer u.Stop()
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("New started %d goroutines before any query", n-base)
	}
	for i := range 50 {
		if _, err := ask(t, u, true, fmt.Sprintf("idle%d.example.", i)); err != nil {
			t.Fatal(err)
		}
	}
	if cl.accepted.Load() == 0 {
		t.Fatal("no connection reached the upstream")
	}
	// Expire (300 ms) passes with no query: every connection is closed and its reader gone.
	deadline := time.Now().Add(5 * time.Second)
	for cl.closed.Load() < cl.accepted.Load() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if c, a := cl.closed.Load(), cl.accepted.Load(); c < a {
		t.Fatalf("%d of %d connections still open after the pool expired", a-c, a)
	}
	opened := cl.accepted.Load()
	if n := goroutinesSettle(base); n > base {
		t.Errorf("%d goroutines more than before New, with every connection closed", n-base)
	}
	// MaxAge (100 ms) passes several times over: nothing is opened on a pool nobody asks.
	time.Sleep(time.Second)
	if a := cl.accepted.Load(); a != opened {
		t.Errorf("%d connections opened while idle", a-opened)
	}
}

// TestRenewalPerPool: a pool renews one connection per RenewQueries queries it carries (not per connection),
// so the flows opened follow the queries: Conns plus queries/RenewQueries. A renewal waits for the previous
// one's replacement; the test waits for it too (bounded), so the count does not depend on the machine's speed.
func TestRenewalPerPool(t *testing.T) {
	var seen atomic.Int64
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", answerer(0, &seen))
	const queries, every = 600, 12
	u := New(addr, Options{RenewQueries: every, RenewGap: time.Nanosecond, MaxAge: time.Hour})
	defer u.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for i := range queries {
		if _, err := ask(t, u, true, fmt.Sprintf("r%d.example.", i)); err != nil {
			t.Fatal(err)
		}
		for u.tcp.renew.Load() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("a renewal still pending after query %d: its replacement never came", i)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	r, d := u.m.Renewals.Load(), u.m.Dials.Load()
	t.Logf("%d queries: %d renewals, %d dials", queries, r, d)
	if want := uint64(queries / every); r < want-1 || r > want+1 {
		t.Errorf("%d renewals for %d queries, want about %d (one per %d queries of the pool)", r, queries, want, every)
	}
	if d > r+uint64(u.tcp.opts.Conns)+2 {
		t.Errorf("%d dials for %d renewals and %d connections", d, r, u.tcp.opts.Conns)
	}
}

// TestSurplusDrainsUnderSteadyLoad: connections beyond the pool's size (a burst's, or a moment's of shallow
// pipelines) go once the others have room for what is in flight, even while a steady load keeps every one of
// them in use. They used to go only after a second unused, which a steady load never gives them: in the
// bench's miss workload the pool crept from about 20 connections to 70 over a minute, each a reader and its
// system calls for fewer answers, and a miss cost a fifth more CPU. The count is bounded by queries, not time.
func TestSurplusDrainsUnderSteadyLoad(t *testing.T) {
	var seen atomic.Int64
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", answerer(0, &seen))
	u := New(addr, Options{RenewQueries: 6, RenewGap: time.Nanosecond, MaxAge: time.Hour})
	defer u.Stop()
	if _, err := ask(t, u, true, "warm.example."); err != nil {
		t.Fatal(err)
	}
	const surplus = 12
	u.tcp.fill(surplus)
	deadline := time.Now().Add(30 * time.Second)
	for u.tcp.live() < surplus {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections live after 30 s, want the %d opened", u.tcp.live(), surplus)
		}
		time.Sleep(time.Millisecond)
	}
	// Two askers, one query each at a time: every connection is picked in turn (none stays unused for the
	// idleExtra that used to be the only way out), and two queries in flight fit in any one pipeline.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				if _, err := ask(t, u, true, fmt.Sprintf("s%d-%d.example.", w, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if live, want := u.tcp.live(), u.tcp.opts.Conns+1; live > want {
		t.Errorf("%d connections live after 600 queries that never had more than 2 in flight, want at most %d "+
			"(the pool's %d and a renewal's replacement)", live, want, u.tcp.opts.Conns)
	}
}

// TestRetiredConnectionIsFreed: a connection drained with nothing in flight (a renewal's, every few queries
// under load) is closed at once, and nothing keeps it: its drain limit's timer used to, for drainLimit (5 s),
// so that a miss storm's renewals kept hundreds of closed connections (their buffers, maps and sockets) on the
// heap for every GC cycle to mark. Waited for (bounded well under drainLimit), not timed.
func TestRetiredConnectionIsFreed(t *testing.T) {
	var seen atomic.Int64
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", answerer(0, &seen))
	u := New(addr, Options{MaxAge: time.Hour})
	defer u.Stop()
	if _, err := ask(t, u, true, "warm.example."); err != nil {
		t.Fatal(err)
	}
	freed := make(chan struct{})
	func() {
		c := u.tcp.pick(nil)
		if c == nil {
			t.Fatal("no live connection after a query")
		}
		runtime.SetFinalizer(c, func(*conn) { close(freed) })
		c.drain()
		if !c.dead.Load() {
			t.Fatal("a connection drained with nothing in flight is not closed at once")
		}
	}()
	deadline := time.Now().Add(drainLimit - time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("a retired connection is still reachable %v after it closed (its drain timer is %v)", drainLimit-time.Second, drainLimit)
		}
	}
}

// TestDrainingSilentConnectionDies: a connection drained while its pod has gone silent (a query in flight, never
// answered) still dies at drainLimit, its query getting the error, though the drain's timer holds it only weakly:
// the pool holds it until then. It takes drainLimit (5 s).
func TestDrainingSilentConnectionDies(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	var seen atomic.Int64
	answer := answerer(0, &seen)
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		if r.Question[0].Name == "hold.example." {
			<-hold
			return
		}
		answer(w, r)
	}))
	u := New(addr, Options{MaxAge: time.Hour})
	defer u.Stop()
	if _, err := ask(t, u, true, "warm.example."); err != nil {
		t.Fatal(err)
	}
	c := u.tcp.pick(nil)
	req := new(dns.Msg)
	req.SetQuestion("hold.example.", dns.TypeA)
	wire, err := req.Pack()
	if err != nil {
		t.Fatal(err)
	}
	q := queries.Get().(*query)
	q.wire, q.qend = wire, questionEnd(wire)
	if _, _, err := c.send(q, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	c.drain()
	c = nil
	runtime.GC()
	runtime.GC()
	select {
	case r := <-q.ch:
		if !errors.Is(r.err, errDrainSilent) || !r.c.dead.Load() {
			t.Errorf("the held query got %v (connection dead: %v), want %v", r.err, r.c.dead.Load(), errDrainSilent)
		}
	case <-time.After(drainLimit + 10*time.Second):
		t.Fatalf("a draining connection with a query unanswered is still open %v after its drain began (limit %v)", drainLimit+10*time.Second, drainLimit)
	}
}
