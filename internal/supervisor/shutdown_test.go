package supervisor

import (
	"testing"
	"time"

	"go.uber.org/zap"
)

// A step that outlives the shutdown deadline is abandoned, and the steps after it are skipped, so shutdown
// as a whole ends by its deadline however a step hangs.
func TestBoundedAbandonsAHungStep(t *testing.T) {
	b := newBounded(zap.NewNop(), 200*time.Millisecond)
	hang := make(chan struct{})
	defer close(hang)
	start := time.Now()
	if !b.do("quick", 0, func() {}) {
		t.Fatal("a quick step reported abandoned")
	}
	if b.do("hung", 0, func() { <-hang }) {
		t.Fatal("a hung step reported done")
	}
	ran := false
	if b.do("after", 0, func() { ran = true }) || ran {
		t.Fatal("a step after the deadline ran")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("shutdown took %v with a 200 ms deadline", d)
	}
}

// A step with its own cap is abandoned at the cap, leaving the rest of the deadline to the next steps.
func TestBoundedCapsAStep(t *testing.T) {
	b := newBounded(zap.NewNop(), time.Hour)
	hang := make(chan struct{})
	defer close(hang)
	if b.do("loops", 50*time.Millisecond, func() { <-hang }) {
		t.Fatal("a hung step reported done")
	}
	ran := false
	if !b.do("leave", 0, func() { ran = true }) || !ran {
		t.Fatal("the next step did not run")
	}
}
