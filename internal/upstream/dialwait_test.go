package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// silentDialer stands in for kube-proxy placing new flows on a pod that drops everything: while dead is set, a
// dial hangs until the test ends (a SYN nobody answers), and counts itself in hung.
type silentDialer struct {
	dead atomic.Bool
	hung atomic.Int64
	done chan struct{}
}

func newSilentDialer(t *testing.T) *silentDialer {
	d := &silentDialer{done: make(chan struct{})}
	t.Cleanup(func() { close(d.done) })
	return d
}

func (d *silentDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if d.dead.Load() {
		d.hung.Add(1)
		<-d.done
		return nil, errors.New("dial: the test ended")
	}
	return dial(network, addr, timeout)
}

// TestFullPipelineDoesNotWaitForADeadDial: when the one connection's pipeline is full, a query opens another,
// and when that dial meets a dead pod, the query does not wait out the dial's bound: after about a live pod's
// handshake it queues on the full connection. (A dial bound is four times the p99 of round trips, at least
// 100 ms; the wait is twice their median.) The pipeline is full for as long as the test needs: the server holds
// the first query until the second is queued behind it, whatever the machine's speed.
func TestFullPipelineDoesNotWaitForADeadDial(t *testing.T) {
	var seen atomic.Int64
	answer := answerer(5*time.Millisecond, &seen)
	firstIn, release := make(chan struct{}), make(chan struct{})
	var firstOnce, releaseOnce sync.Once
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		if r.Question[0].Name == "first.example." {
			firstOnce.Do(func() { close(firstIn) })
			<-release
		}
		answer(w, r)
	}))
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	u := New(addr, Options{Conns: 1, RenewQueries: 1 << 62, MaxAge: time.Hour})
	defer u.Stop()
	d := newSilentDialer(t)
	u.dial = d.dial
	for i := range 40 { // round trips seen: the pipeline's depth is 1 at 5 ms a query
		if _, err := ask(t, u, true, "warm"+string(rune('a'+i%26))+".example."); err != nil {
			t.Fatal(err)
		}
	}
	if depth := u.tcp.depth(); depth != 1 {
		t.Fatalf("pipeline depth %d after 5 ms answers, want 1", depth)
	}
	d.dead.Store(true)
	var wg sync.WaitGroup
	var firstErr, secondErr error
	wg.Add(2)
	go func() { defer wg.Done(); _, firstErr = ask(t, u, true, "first.example.") }()
	select {
	case <-firstIn:
	case <-time.After(10 * time.Second):
		t.Fatal("the first query did not reach the server within 10 s")
	}
	full := u.tcp.pick(nil) // the pool's one live connection
	if full == nil || full.inflight.Load() != 1 {
		t.Fatal("no connection holds the first query")
	}
	bound, wait := u.lat.dialBound(), u.lat.dialWait() // as the second query finds them
	start := time.Now()
	go func() { defer wg.Done(); _, secondErr = ask(t, u, true, "second.example.") }()
	deadline := start.Add(10 * time.Second)
	for full.inflight.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	queued, hung := time.Since(start), d.hung.Load()
	behind := full.inflight.Load() >= 2
	releaseOnce.Do(func() { close(release) })
	wg.Wait()
	t.Logf("the second query was queued on the full connection after %v; dial bound %v, wait for a new connection %v; dials hung: %d",
		queued, bound, wait, hung)
	if firstErr != nil || secondErr != nil {
		t.Fatalf("first query: %v; second query: %v", firstErr, secondErr)
	}
	if hung == 0 {
		t.Fatal("no dial was made while the pipeline was full: the test proves nothing")
	}
	if !behind {
		t.Fatalf("the second query was not queued on the full connection within 10 s while the dial hung")
	}
	if queued >= bound {
		t.Errorf("the second query was queued after %v, the dial's bound (%v): it waited for the dial to the dead pod", queued, bound)
	}
}

// TestFreshPoolDialsPastDeadPods: a fresh agent whose first dials all meet a dead pod starts more while they
// hang, and answers through the first that reaches a live one, long before the hung ones give up.
func TestFreshPoolDialsPastDeadPods(t *testing.T) {
	var seen atomic.Int64
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", answerer(0, &seen))
	u := New(addr, Options{})
	defer u.Stop()
	d := newSilentDialer(t)
	u.dial = d.dial
	d.dead.Store(true)
	var hungFirst atomic.Int64
	go func() {
		// The pool's first dials (Options.Conns) hang; the next ones reach a live pod.
		for d.hung.Load() < int64(u.tcp.opts.Conns) {
			time.Sleep(time.Millisecond)
		}
		hungFirst.Store(d.hung.Load())
		d.dead.Store(false)
	}()
	req := new(dns.Msg)
	req.SetQuestion("fresh.example.", dns.TypeA)
	ret, err := u.Exchange(context.Background(), req, true, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatalf("no answer while the first dials hung: %v", err)
	}
	if len(ret.Answer) != 1 {
		t.Fatalf("answer: %v", ret)
	}
	if hungFirst.Load() < int64(u.tcp.opts.Conns) {
		t.Fatalf("%d dials hung, want the pool's first %d", hungFirst.Load(), u.tcp.opts.Conns)
	}
	t.Logf("answered while the first %d dials hung, after %d dials in all", hungFirst.Load(), u.m.Dials.Load()+uint64(d.hung.Load()))
}

// TestOutageDialsBounded: when every pod goes silent under load (an outage), the queries waiting for a
// connection start more dials while the pending ones hang, but never more than twice the pool's size at once:
// each dial is a SYN and a conntrack entry on the node. (Without the bound, the queries' waits of a millisecond
// each started a dial apiece, up to the pool's cap of 256.)
func TestOutageDialsBounded(t *testing.T) {
	var seen atomic.Int64
	addr, stop := testenv.ServeDNS(t, "127.0.0.1:0", answerer(0, &seen))
	u := New(addr, Options{})
	defer u.Stop()
	d := newSilentDialer(t)
	u.dial = d.dial
	for i := range 40 { // round trips seen: the waits are a millisecond or two
		if _, err := ask(t, u, true, fmt.Sprintf("warm%d.example.", i)); err != nil {
			t.Fatal(err)
		}
	}
	d.dead.Store(true)
	stop() // the connections end; every dial from now on hangs
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = askWithin(t, u, true, fmt.Sprintf("outage%d.example.", i), 500*time.Millisecond)
		}()
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	if hung, most := d.hung.Load(), int64(2*u.tcp.opts.Conns); hung > most {
		t.Errorf("%d dials hung at once during the outage, want at most %d", hung, most)
	} else if hung < int64(u.tcp.opts.Conns) {
		t.Errorf("%d dials hung: the pool did not even try to replace its connections", hung)
	} else {
		t.Logf("%d dials hung during the outage (at most %d)", hung, most)
	}
}
