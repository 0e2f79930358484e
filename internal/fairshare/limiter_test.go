package fairshare

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// The sources the tests name: each in a prefix of its own.
var (
	flood  = ip("192.0.2.1")
	victim = ip("198.51.100.1")
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// A lone source takes the whole bound; once another asks, the flooder's next queries are refused and the slot
// it gives back goes to the other, who waits for it instead of being refused.
func TestLimiterSharesTheBound(t *testing.T) {
	l := newLimiter(4, time.Second)
	ctx := context.Background()
	for i := range 4 {
		if !l.acquire(ctx, flood) {
			t.Fatalf("lone source refused its %dth slot of 4", i+1)
		}
	}
	got := make(chan bool)
	go func() { got <- l.acquire(ctx, victim) }()
	waitFor(t, l, 1)
	if l.acquire(ctx, flood) {
		t.Fatal("the flooder got a fifth slot while another source waits")
	}
	l.release(flood)
	if !<-got {
		t.Fatal("the victim was refused")
	}
	// The flooder holds 3, the victim 1; share 2: the flooder's next waits no more than it is refused, the
	// victim's second waits and gets the next slot given back.
	go func() { got <- l.acquire(ctx, victim) }()
	waitFor(t, l, 1)
	l.release(flood)
	if !<-got {
		t.Fatal("the victim's second query was refused under its share")
	}
	if in, w, s := l.inFlight(); in != 4 || w != 0 || s != 2 {
		t.Errorf("in flight %d, waiting %d, sources %d; want 4, 0, 2", in, w, s)
	}
}

// A waiter that gets no slot within maxWait is refused and leaves no trace; a source that gives back its
// last slot is forgotten.
func TestLimiterWaitIsBounded(t *testing.T) {
	l := newLimiter(1, 50*time.Millisecond)
	ctx := context.Background()
	if !l.acquire(ctx, flood) {
		t.Fatal("first query refused")
	}
	start := time.Now()
	if l.acquire(ctx, victim) {
		t.Fatal("a second source got a slot of a bound of 1 that is held")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("refused after %s, before maxWait", d)
	}
	l.release(flood)
	if in, w, s := l.inFlight(); in != 0 || w != 0 || s != 0 {
		t.Errorf("in flight %d, waiting %d, sources %d after everything ended; want 0", in, w, s)
	}
}

func waitFor(t *testing.T, l *limiter, waiting int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Second, fmt.Sprintf("%d waiting", waiting), func() bool {
		_, w, _ := l.inFlight()
		return w == waiting
	})
}

// Many sources at once, some flooding: never more than the limit in flight, and nothing left once all end.
func TestLimiterUnderContention(t *testing.T) {
	const limit = 8
	l := newLimiter(limit, 20*time.Millisecond)
	var held atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		src := ip(fmt.Sprintf("203.0.%d.1", g%5)) // five sources in five prefixes
		wg.Go(func() {
			for range 50 {
				if !l.acquire(context.Background(), src) {
					continue
				}
				if n := held.Add(1); n > limit {
					t.Errorf("%d in flight over a limit of %d", n, limit)
				}
				time.Sleep(100 * time.Microsecond)
				held.Add(-1)
				l.release(src)
			}
		})
	}
	wg.Wait()
	if in, w, s := l.inFlight(); in != 0 || w != 0 || s != 0 {
		t.Errorf("in flight %d, waiting %d, sources %d after everything ended; want 0", in, w, s)
	}
}

// acquireAsync starts an acquire for src and returns where its result arrives.
func acquireAsync(l *limiter, src netip.Addr) chan bool {
	got := make(chan bool, 1)
	go func() { got <- l.acquire(context.Background(), src) }()
	return got
}

// Many flooding addresses in two prefixes hold the whole bound; a third prefix's source, asking three at a
// time, waits for each (it is not refused, as it was when each of the flood's forty addresses was a client
// like it) and gets the next three slots given back, while the flood's next queries are refused.
func TestLimiterSharesByPrefix(t *testing.T) {
	l := newLimiter(10, 5*time.Second)
	ctx := context.Background()
	var held []netip.Addr
	for i := range 40 {
		src := ip(fmt.Sprintf("10.1.%d.%d", i%2, 1+i))
		if l.acquire(ctx, src) {
			held = append(held, src)
		}
	}
	if len(held) != 10 {
		t.Fatalf("the flood holds %d slots, want the whole bound of 10", len(held))
	}
	var got []chan bool
	for range 3 {
		got = append(got, acquireAsync(l, ip("198.18.0.2")))
	}
	waitFor(t, l, 3)
	for i := range 5 {
		if l.acquire(ctx, ip(fmt.Sprintf("10.1.%d.%d", i%2, 100+i))) {
			t.Fatal("a flooding prefix over its share got a slot while another waits")
		}
	}
	for i := range 3 {
		l.release(held[i])
	}
	for i := range 3 {
		if !<-got[i] {
			t.Fatalf("one of the victim's queries was refused")
		}
	}
	if in, w, _ := l.inFlight(); in != 10 || w != 0 {
		t.Errorf("in flight %d, waiting %d; want 10, 0", in, w)
	}
}

// Within one prefix (pods of one node), addresses share as clients did before prefixes: the heavy one's next
// query is refused, the light one's waits and gets the slot given back.
func TestLimiterSharesWithinAPrefix(t *testing.T) {
	l := newLimiter(4, time.Second)
	ctx := context.Background()
	for range 4 {
		if !l.acquire(ctx, ip("10.244.1.7")) {
			t.Fatal("a lone source was refused")
		}
	}
	got := acquireAsync(l, ip("10.244.1.8"))
	waitFor(t, l, 1)
	if l.acquire(ctx, ip("10.244.1.7")) {
		t.Fatal("the heavy address got a fifth slot while its neighbour waits")
	}
	l.release(ip("10.244.1.7"))
	if !<-got {
		t.Fatal("the light address was refused")
	}
}

// With every waiting place taken, a source that may wait takes the place of the newest waiter of the group
// that holds and waits for the most: that one is refused, the light one waits.
func TestLimiterLightSourceTakesAHeavyWaitersPlace(t *testing.T) {
	l := newLimiter(10, 5*time.Second)
	ctx := context.Background()
	for range 10 {
		l.acquire(ctx, ip("10.0.0.1")) // A holds the bound
	}
	var heavy []chan bool
	for range 5 {
		heavy = append(heavy, acquireAsync(l, ip("10.0.1.1"))) // B: 2 groups, share 5
		waitFor(t, l, len(heavy))
	}
	for i := range 3 {
		acquireAsync(l, ip("10.0.2.1")) // C: 3 groups, share 3
		waitFor(t, l, 6+i)
	}
	for i := range 2 {
		acquireAsync(l, ip("10.0.3.1")) // D: 4 groups, share 2
		waitFor(t, l, 9+i)
	}
	light := acquireAsync(l, ip("10.0.4.1")) // E: the waiting places are all taken
	select {
	case ok := <-heavy[4]:
		if ok {
			t.Fatal("B's newest waiter got a slot")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no waiter of the heaviest group was refused to make room")
	}
	if _, w, _ := l.inFlight(); w != 10 {
		t.Errorf("%d waiting, want 10 (E in B's newest place)", w)
	}
	// B, C, D and E all hold nothing: the slots given back go to each in turn, the oldest waiter first.
	for range 4 {
		l.release(ip("10.0.0.1"))
	}
	select {
	case ok := <-light:
		if !ok {
			t.Fatal("E was refused")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("E did not get one of the four slots given back")
	}
}

// A lone client's queries allocate nothing in the limiter once its first has: the group and the source that
// forget drops are used again. A flood through one prefix grows its group's map, which is then let go.
func TestLimiterReusesWhatItForgets(t *testing.T) {
	l := newLimiter(100, time.Second)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		if l.acquire(ctx, flood) {
			l.release(flood)
		}
	}); n != 0 {
		t.Errorf("a lone client's query allocated %v times, want 0", n)
	}
	for i := range spareMembersMax + 1 {
		if !l.acquire(ctx, ip(fmt.Sprintf("10.9.9.%d", i+1))) {
			t.Fatal("refused under the bound")
		}
	}
	for i := range spareMembersMax + 1 {
		l.release(ip(fmt.Sprintf("10.9.9.%d", i+1)))
	}
	for _, g := range l.spareGroups {
		if g.peak > spareMembersMax {
			t.Errorf("a group that had %d members was kept, the bound %d", g.peak, spareMembersMax)
		}
	}
	if in, w, s := l.inFlight(); in != 0 || w != 0 || s != 0 {
		t.Errorf("in flight %d, waiting %d, sources %d after everything ended; want 0", in, w, s)
	}
}
