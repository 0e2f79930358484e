package supervisor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelocaldns/nodelocaldns/internal/runner"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// An idle agent's hour, on the fake clock: with nothing changing, the only thing that asks for a pass is the
// foreign report's recheck, once a minute. Each pass puts the -syncinterval pass off by a whole interval, so an
// hour's interval never comes. (test/e2e/reconcile's TestIdle watches the real binary for what a clock cannot
// show: that the kernel's notifications of its own writes ask for no pass.)
func TestIdleHourOnTheClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	passes := make(chan string, 100)
	r := runner.New(runner.Config{MinInterval: minPassInterval, MaxInterval: time.Hour, Clock: clk},
		func(_ context.Context, reasons []string) (bool, error) {
			passes <- strings.Join(reasons, ",")
			return false, nil
		})
	rc := &reconciler{runner: r}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	wg.Go(func() { rc.recheckForeign(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	for minute := 1; minute <= 90; minute++ {
		// The runner waits for its periodic pass and the recheck for its tick: both on the clock.
		testenv.Eventually(t, 5*time.Second, "the runner and the recheck to wait on the clock", func() bool { return clk.Waiters() == 2 })
		clk.Step(time.Minute)
		select {
		case got := <-passes:
			if got != reasonForeign {
				t.Fatalf("minute %d: a pass for %q, want the foreign recheck's alone", minute, got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("minute %d: no pass", minute)
		}
	}
	select {
	case got := <-passes:
		t.Fatalf("unexpected pass (%s)", got)
	case <-time.After(50 * time.Millisecond):
	}
}
