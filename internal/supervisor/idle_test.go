package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// An idle agent's hour, on the fake clock: with nothing changing, the only thing that asks for a pass is the
// foreign report's recheck, once a minute. Each pass puts the -syncinterval pass off by a whole interval, so an
// hour's interval never comes. (test/e2e/reconcile's TestIdle watches the real binary for what a clock cannot
// show: that the kernel's notifications of its own writes ask for no pass.)
func TestIdleHourOnTheClock(t *testing.T) {
	r, rec, clk := startRunner(t, runnerConfig{minInterval: minPassInterval, maxInterval: time.Hour})
	rc := &reconciler{runner: r}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rc.recheckForeign(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for minute := 1; minute <= 90; minute++ {
		// The runner waits for its periodic pass and the recheck for its tick: both on the clock.
		testenv.Eventually(t, 5*time.Second, "the runner and the recheck to wait on the clock", func() bool { return clk.Waiters() == 2 })
		clk.Step(time.Minute)
		if got := rec.next(t); got != reasonForeign {
			t.Fatalf("minute %d: a pass for %q, want the foreign recheck's alone", minute, got)
		}
	}
	rec.none(t)
}
