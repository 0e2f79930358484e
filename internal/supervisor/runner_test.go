package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// passRecorder records each pass and lets the test decide its result.
type passRecorder struct {
	passes chan string // the reasons of each pass, joined
	result chan error  // what the pass returns
}

func newRecorder() *passRecorder {
	return &passRecorder{passes: make(chan string, 100), result: make(chan error, 100)}
}

func (p *passRecorder) pass(_ context.Context, reasons []string) error {
	p.passes <- strings.Join(reasons, ",")
	select {
	case err := <-p.result:
		return err
	default:
		return nil
	}
}

// next waits (in real time) for the next pass.
func (p *passRecorder) next(t *testing.T) string {
	t.Helper()
	select {
	case r := <-p.passes:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no pass")
		return ""
	}
}

func (p *passRecorder) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-p.passes:
		t.Fatalf("unexpected pass (%s)", r)
	case <-time.After(50 * time.Millisecond):
	}
}

func startRunner(t *testing.T, cfg RunnerConfig) (*Runner, *passRecorder, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cfg.Clock = clk
	rec := newRecorder()
	r := NewRunner(cfg, rec.pass)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, rec, clk
}

// waitForTimer waits until the runner is blocked on a timer of the fake clock.
func waitForTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("runner never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRunnerCoalescesTriggers(t *testing.T) {
	r, rec, clk := startRunner(t, RunnerConfig{MinInterval: time.Second, MaxInterval: time.Hour})
	waitForTimer(t, clk)
	r.Trigger("nft")
	if got := rec.next(t); got != "nft" {
		t.Fatalf("first pass reasons = %q", got)
	}
	// Within minInterval of that pass: all of these must share one pass, after the interval.
	waitForTimer(t, clk)
	r.Trigger("link")
	r.Trigger("nft")
	r.Trigger("link")
	waitForTimer(t, clk)
	rec.none(t)
	clk.Step(time.Second)
	if got := rec.next(t); got != "link,nft" {
		t.Fatalf("coalesced pass reasons = %q, want link,nft", got)
	}
	rec.none(t)
}

func TestRunnerPeriodicIsOnlyASafetyNet(t *testing.T) {
	_, rec, clk := startRunner(t, RunnerConfig{MinInterval: time.Millisecond, MaxInterval: time.Minute})
	waitForTimer(t, clk)
	clk.Step(59 * time.Second)
	rec.none(t)
	clk.Step(time.Second)
	if got := rec.next(t); got != ReasonPeriodic {
		t.Fatalf("pass reasons = %q, want periodic", got)
	}
}

func TestRunnerRetriesWithBackoff(t *testing.T) {
	r, rec, clk := startRunner(t, RunnerConfig{MinInterval: time.Millisecond, MaxInterval: time.Hour, BackoffMin: 100 * time.Millisecond, BackoffMax: 350 * time.Millisecond})
	waitForTimer(t, clk)
	boom := errors.New("boom")
	rec.result <- boom
	rec.result <- boom
	rec.result <- boom
	r.Trigger("nft")
	rec.next(t)
	// Retries after 100ms, 200ms, then capped at 350ms; then success ends the retries.
	for _, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond} {
		waitForTimer(t, clk)
		clk.Step(d - time.Millisecond)
		rec.none(t)
		clk.Step(time.Millisecond)
		if got := rec.next(t); got != ReasonRetry {
			t.Fatalf("after %v: reasons = %q, want retry", d, got)
		}
	}
	waitForTimer(t, clk)
	clk.Step(10 * time.Second)
	rec.none(t)
}

func TestRunnerStopsOnCancel(t *testing.T) {
	r := NewRunner(RunnerConfig{MaxInterval: time.Hour}, func(context.Context, []string) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
