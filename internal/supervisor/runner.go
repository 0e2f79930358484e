package supervisor

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Trigger reasons the runner adds by itself.
const (
	ReasonPeriodic = "periodic" // the -syncinterval safety net
	ReasonRetry    = "retry"    // the previous pass failed
)

// Runner runs a pass function on demand, the way kube-proxy's BoundedFrequencyRunner does: triggers coalesce
// into one pending pass (a channel of one), passes are at least minInterval apart, a failed pass is retried
// with exponential backoff, and a periodic pass every maxInterval is only a safety net. The pass recomputes
// everything from scratch, so the runner carries no state between passes but the reasons that asked for one.
type Runner struct {
	pass                     func(ctx context.Context, reasons []string) error
	minInterval, maxInterval time.Duration
	backoffMin, backoffMax   time.Duration
	clock                    clock.Clock

	kick    chan struct{}
	mu      sync.Mutex
	reasons map[string]bool
}

// RunnerConfig configures a Runner. Zero backoff values default to 10 ms and maxInterval/4.
type RunnerConfig struct {
	MinInterval, MaxInterval time.Duration
	BackoffMin, BackoffMax   time.Duration
	Clock                    clock.Clock // nil: the real clock
}

// NewRunner returns a runner for pass; start it with Run.
func NewRunner(cfg RunnerConfig, pass func(ctx context.Context, reasons []string) error) *Runner {
	r := &Runner{
		pass: pass, minInterval: cfg.MinInterval, maxInterval: cfg.MaxInterval,
		backoffMin: cfg.BackoffMin, backoffMax: cfg.BackoffMax, clock: cfg.Clock,
		kick: make(chan struct{}, 1), reasons: map[string]bool{},
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.backoffMin <= 0 {
		r.backoffMin = 10 * time.Millisecond
	}
	if r.backoffMax <= 0 {
		r.backoffMax = max(r.backoffMin, r.maxInterval/4)
	}
	return r
}

// Trigger asks for a pass soon, for reason. It never blocks; triggers that arrive before the pass starts
// share it.
func (r *Runner) Trigger(reason string) {
	r.mu.Lock()
	r.reasons[reason] = true
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Runner) takeReasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	reasons := make([]string, 0, len(r.reasons))
	for k := range r.reasons {
		reasons = append(reasons, k)
	}
	clear(r.reasons)
	slices.Sort(reasons)
	return reasons
}

// Run runs passes until ctx is done. A pass that fails is retried; Run itself never fails.
func (r *Runner) Run(ctx context.Context) {
	var lastRun, retryAt time.Time
	failures := 0
	nextPeriodic := r.clock.Now().Add(r.maxInterval)
	for {
		wait, reason := nextPeriodic.Sub(r.clock.Now()), ReasonPeriodic
		if !retryAt.IsZero() && retryAt.Before(nextPeriodic) {
			wait, reason = retryAt.Sub(r.clock.Now()), ReasonRetry
		}
		t := r.clock.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.kick:
			t.Stop()
		case <-t.C():
			r.Trigger(reason)
			<-r.kick
		}
		if since := r.clock.Since(lastRun); !lastRun.IsZero() && since < r.minInterval {
			if !r.sleep(ctx, r.minInterval-since) {
				return
			}
		}
		select {
		case <-r.kick: // triggers that arrived while waiting out minInterval are served by this pass
		default:
		}
		err := r.pass(ctx, r.takeReasons())
		lastRun = r.clock.Now()
		nextPeriodic = lastRun.Add(r.maxInterval)
		if err == nil {
			failures, retryAt = 0, time.Time{}
			continue
		}
		backoff := r.backoffMin << min(failures, 30)
		failures++
		retryAt = lastRun.Add(min(backoff, r.backoffMax))
	}
}

func (r *Runner) sleep(ctx context.Context, d time.Duration) bool {
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
