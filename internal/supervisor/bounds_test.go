package supervisor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"
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

// /health fails while a reconcile or reload pass runs longer than passHung, whatever DNS does.
func TestLivenessFailsOnAHungPass(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	for _, name := range []string{"reconcile", "reload"} {
		t.Run(name, func(t *testing.T) {
			r := newRunner(runnerConfig{maxInterval: time.Hour, clock: clk}, nil)
			s := &Supervisor{log: zap.NewNop()}
			if name == "reconcile" {
				s.runner = r
			} else {
				s.reloads = r
			}
			r.busySince.Store(clk.Now().Add(-passHung - time.Second).UnixNano())
			err := s.liveness(context.Background())
			if err == nil || !strings.Contains(err.Error(), name+" pass running for") {
				t.Fatalf("liveness() = %v, want a hung %s pass", err, name)
			}
		})
	}
}
