package upstream

import (
	"testing"
	"time"
)

// TestBoundsFromPercentiles: the hedge and the dial bound follow the p99 of recent round trips, not their mean:
// a few slow answers among fast ones move the bounds; the pipeline depth follows the service time (round trips
// divided by the queries ahead), so answers that queued behind others on their connection do not shorten it.
func TestBoundsFromPercentiles(t *testing.T) {
	var l latency
	if l.hedgeAfter() != freshHedge || l.dialBound() != freshDialBound {
		t.Fatalf("fresh bounds %v, %v; want %v, %v", l.hedgeAfter(), l.dialBound(), freshHedge, freshDialBound)
	}
	// 97 answers in 1 ms, 3 in 40 ms: the mean is 2.2 ms, the p99 40 ms.
	for i := range 100 {
		d := time.Millisecond
		if i%33 == 32 {
			d = 40 * time.Millisecond
		}
		l.observe(d, 0)
	}
	if got, want := l.hedgeAfter(), hedgeFactor*40*time.Millisecond; got != want {
		t.Errorf("hedge after %v, want %v (2 x p99)", got, want)
	}
	if got, want := l.dialBound(), 160*time.Millisecond; got != want {
		t.Errorf("dial bound %v, want %v (4 x p99)", got, want)
	}
	if got := l.median(); got != time.Millisecond {
		t.Errorf("median %v, want 1ms", got)
	}
	// A ring's worth of answers that each waited behind 9 others, 10 ms each: 1 ms of service apiece.
	for range ringSize {
		l.observe(10*time.Millisecond, 9)
	}
	if got := l.serviceTime(); got != time.Millisecond {
		t.Errorf("service time %v, want 1ms", got)
	}
	if got, want := l.hedgeAfter(), hedgeFactor*10*time.Millisecond; got != max(want, minHedge) {
		t.Errorf("hedge after %v, want %v", got, max(want, minHedge))
	}
}
