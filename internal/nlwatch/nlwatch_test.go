package nlwatch

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

var fast = Backoff{Min: time.Millisecond, Max: 4 * time.Millisecond}

func TestFirstSubscriptionMustComeUp(t *testing.T) {
	want := errors.New("no socket")
	calls := 0
	err := Run(context.Background(), zaptest.NewLogger(t), fast, func(string) { t.Error("trigger called") },
		func(context.Context, func()) error { calls++; return want })
	if !errors.Is(err, want) || calls != 1 {
		t.Errorf("Run = %v after %d attempts, want the first attempt's error", err, calls)
	}
}

// A script of attempts: each either comes up and then ends, or fails before coming up. Only the replacements
// that come up say "overrun"; failed attempts are retried with a growing wait; cancelling ends Run with nil.
func TestResubscribesAndSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	script := []bool{true, false, false, false, true, true} // came up?
	var log []string
	var starts []time.Time
	err := Run(ctx, zaptest.NewLogger(t), fast, func(r string) { log = append(log, r) },
		func(ctx context.Context, up func()) error {
			i := len(starts)
			starts = append(starts, time.Now())
			if i == len(script) {
				up()
				log = append(log, "relaying")
				cancel()
				<-ctx.Done()
				return nil
			}
			if !script[i] {
				log = append(log, "failed")
				return errors.New("subscribe failed")
			}
			up()
			log = append(log, "up")
			return errors.New("overrun")
		})
	if err != nil {
		t.Fatalf("Run = %v after cancel, want nil", err)
	}
	want := []string{"up", "failed", "failed", "failed", ReasonOverrun, "up", ReasonOverrun, "up", ReasonOverrun, "relaying"}
	if !slices.Equal(log, want) {
		t.Errorf("events = %q\nwant     %q", log, want)
	}
	// The waits after the three failures: 1, 2, then 4 ms (the cap); none after a subscription that was up.
	for i, min := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond} {
		if d := starts[i+2].Sub(starts[i+1]); d < min {
			t.Errorf("wait after failure %d = %v, want at least %v", i+1, d, min)
		}
	}
}

func TestCancelEndsTheBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	failed := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- Run(ctx, zaptest.NewLogger(t), Backoff{Min: time.Hour, Max: time.Hour}, func(string) {},
			func(_ context.Context, up func()) error {
				attempts++
				if attempts == 1 {
					up()
					return errors.New("overrun")
				}
				close(failed) // Run now waits an hour before the next attempt, unless ctx ends the wait
				return errors.New("subscribe failed")
			})
	}()
	<-failed
	cancel()
	select {
	case err := <-done:
		if err != nil || attempts != 2 {
			t.Errorf("Run = %v after %d attempts, want nil after 2", err, attempts)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when ctx was cancelled during its backoff")
	}
}
