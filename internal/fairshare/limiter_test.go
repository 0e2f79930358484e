package fairshare

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A lone source takes the whole bound; once another asks, the flooder's next queries are refused and the slot
// it gives back goes to the other, who waits for it instead of being refused.
func TestLimiterSharesTheBound(t *testing.T) {
	l := newLimiter(4, time.Second)
	ctx := context.Background()
	for i := range 4 {
		if !l.acquire(ctx, "flood") {
			t.Fatalf("lone source refused its %dth slot of 4", i+1)
		}
	}
	got := make(chan bool)
	go func() { got <- l.acquire(ctx, "victim") }()
	waitFor(t, l, 1)
	if l.acquire(ctx, "flood") {
		t.Fatal("the flooder got a fifth slot while another source waits")
	}
	l.release("flood")
	if !<-got {
		t.Fatal("the victim was refused")
	}
	// The flooder holds 3, the victim 1; share 2: the flooder's next waits no more than it is refused, the
	// victim's second waits and gets the next slot given back.
	go func() { got <- l.acquire(ctx, "victim") }()
	waitFor(t, l, 1)
	l.release("flood")
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
	if !l.acquire(ctx, "a") {
		t.Fatal("first query refused")
	}
	start := time.Now()
	if l.acquire(ctx, "b") {
		t.Fatal("a second source got a slot of a bound of 1 that is held")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("refused after %s, before maxWait", d)
	}
	l.release("a")
	if in, w, s := l.inFlight(); in != 0 || w != 0 || s != 0 {
		t.Errorf("in flight %d, waiting %d, sources %d after everything ended; want 0", in, w, s)
	}
}

func waitFor(t *testing.T, l *limiter, waiting int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, w, _ := l.inFlight(); w == waiting {
			return
		}
	}
	t.Fatalf("never %d waiting", waiting)
}

// Many sources at once, some flooding: never more than the limit in flight, and nothing left once all end.
func TestLimiterUnderContention(t *testing.T) {
	const limit = 8
	l := newLimiter(limit, 20*time.Millisecond)
	var held atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		src := fmt.Sprintf("s%d", g%5)
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
