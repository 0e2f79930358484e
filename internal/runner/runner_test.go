package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// passRecorder records each pass and lets the test decide its result.
type passRecorder struct {
	passes  chan string // the reasons of each pass, joined
	result  chan error  // what the pass returns
	changed atomic.Bool // whether passes report a change
	release chan struct{}
	block   atomic.Bool // passes wait for release
}

func newRecorder() *passRecorder {
	return &passRecorder{passes: make(chan string, 100), result: make(chan error, 100), release: make(chan struct{})}
}

func (p *passRecorder) pass(_ context.Context, reasons []string) (bool, error) {
	p.passes <- strings.Join(reasons, ",")
	if p.block.Load() {
		<-p.release
	}
	select {
	case err := <-p.result:
		return false, err
	default:
		return p.changed.Load(), nil
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

func startRunner(t *testing.T, cfg Config) (*Runner, *passRecorder, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cfg.Clock = clk
	rec := newRecorder()
	r := New(cfg, rec.pass)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, rec, clk
}

// waitForTimer waits until the runner is blocked on a timer of the fake clock.
func waitForTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "the runner to wait on the clock", clk.HasWaiters)
}

func TestRunnerCoalescesTriggers(t *testing.T) {
	r, rec, clk := startRunner(t, Config{MinInterval: time.Second, MaxInterval: time.Hour})
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
	_, rec, clk := startRunner(t, Config{MinInterval: time.Millisecond, MaxInterval: time.Minute})
	waitForTimer(t, clk)
	clk.Step(59 * time.Second)
	rec.none(t)
	clk.Step(time.Second)
	if got := rec.next(t); got != ReasonPeriodic {
		t.Fatalf("pass reasons = %q, want periodic", got)
	}
}

func TestRunnerRetriesWithBackoff(t *testing.T) {
	r, rec, clk := startRunner(t, Config{MinInterval: time.Millisecond, MaxInterval: time.Hour, BackoffMin: 100 * time.Millisecond, BackoffMax: 350 * time.Millisecond})
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
	r := New(Config{MaxInterval: time.Hour}, func(context.Context, []string) (bool, error) { return false, nil })
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

// A writer that keeps undoing our repairs makes every pass change something: after damp.after such passes in a
// row the wait before the next doubles up to the cap; one pass that finds nothing to change ends it.
func TestRunnerDampsAFight(t *testing.T) {
	var waits []time.Duration
	cfg := Config{MinInterval: 5 * time.Millisecond, MaxInterval: time.Hour, Damp: Damping{
		After: 3, Window: time.Second, Min: 100 * time.Millisecond, Max: 300 * time.Millisecond,
		OnDamp: func(d time.Duration, _ int) { waits = append(waits, d) },
	}}
	r, rec, clk := startRunner(t, cfg)
	rec.changed.Store(true)
	waitForTimer(t, clk)
	// Three repairs 5 ms apart: the first two are not delayed beyond minInterval.
	r.Trigger("link")
	rec.next(t)
	for range 2 {
		waitForTimer(t, clk)
		r.Trigger("link")
		waitForTimer(t, clk)
		rec.none(t)
		clk.Step(5 * time.Millisecond)
		rec.next(t)
	}
	// Now damped: 100 ms, 200 ms, then the 300 ms cap.
	for _, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond} {
		waitForTimer(t, clk)
		r.Trigger("link")
		waitForTimer(t, clk)
		clk.Step(d - time.Millisecond)
		rec.none(t)
		clk.Step(time.Millisecond)
		if got := rec.next(t); got != "link" {
			t.Fatalf("damped pass reasons = %q", got)
		}
	}
	// The writer stops: this pass changes nothing, and the next trigger is served after minInterval again. The
	// last damped pass must have returned (reporting a change) first: the runner waits on the clock only then.
	waitForTimer(t, clk)
	rec.changed.Store(false)
	r.Trigger("link")
	waitForTimer(t, clk)
	clk.Step(300 * time.Millisecond)
	rec.next(t)
	waitForTimer(t, clk)
	r.Trigger("link")
	waitForTimer(t, clk)
	clk.Step(5 * time.Millisecond)
	rec.next(t)
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 0}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Fatalf("OnDamp waits = %v, want %v", waits, want)
	}
}

// Repairs far apart are never damped, however many.
func TestRunnerDoesNotDampSeparateRepairs(t *testing.T) {
	cfg := Config{MinInterval: 5 * time.Millisecond, MaxInterval: time.Hour, Damp: Damping{
		After: 2, Window: time.Second, Min: time.Minute, Max: time.Minute,
	}}
	r, rec, clk := startRunner(t, cfg)
	rec.changed.Store(true)
	for range 5 {
		waitForTimer(t, clk)
		clk.Step(2 * time.Second)
		waitForTimer(t, clk)
		r.Trigger("link")
		rec.next(t)
	}
}

// busy reports the pass in progress and its age, so /health can fail on a pass that hangs.
func TestRunnerReportsABusyPass(t *testing.T) {
	r, rec, clk := startRunner(t, Config{MinInterval: time.Millisecond, MaxInterval: time.Hour})
	if _, ok := r.Busy(); ok {
		t.Fatal("busy before any pass")
	}
	rec.block.Store(true)
	waitForTimer(t, clk)
	r.Trigger("link")
	rec.next(t)
	clk.Step(42 * time.Second)
	if d, ok := r.Busy(); !ok || d != 42*time.Second {
		t.Fatalf("busy() = %v, %v; want 42s, true", d, ok)
	}
	rec.release <- struct{}{}
	testenv.Eventually(t, 5*time.Second, "busy() to clear after the pass returned", func() bool { _, ok := r.Busy(); return !ok })
}
