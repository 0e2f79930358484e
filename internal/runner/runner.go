// Package runner runs a pass function on demand at a bounded frequency, with backoff on failure, damping
// of a fight with another writer, and the start of the pass in progress for a liveness check. It touches
// nothing of the node: what a pass does is its caller's.
//
// May touch: nothing.
package runner

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Trigger reasons the runner adds by itself.
const (
	ReasonPeriodic = "periodic" // the MaxInterval safety net
	ReasonRetry    = "retry"    // the previous pass failed
)

// Runner runs a pass function on demand, the way kube-proxy's BoundedFrequencyRunner does: triggers coalesce
// into one pending pass (a channel of one), passes are at least minInterval apart, a failed pass is retried
// with exponential backoff, and a periodic pass every maxInterval is only a safety net. The pass recomputes
// everything from scratch, so the runner carries no state between passes but the reasons that asked for one.
//
// Two more bounds keep a runner from spinning or hiding a hang:
//   - damping: when a writer outside the agent keeps undoing what passes repair (a script re-deleting an
//     address, a second manager of the same interface), each pass that changed something soon after the last
//     one that did lengthens the wait before the next, up to a cap; a pass that finds nothing to change ends
//     the fight. A single repair is never delayed.
//   - liveness: the start of the pass in progress is recorded, so /health can tell a pass that hangs.
type Runner struct {
	pass                     PassFunc
	minInterval, maxInterval time.Duration
	backoffMin, backoffMax   time.Duration
	damp                     Damping
	clock                    clock.Clock

	kick    chan struct{}
	mu      sync.Mutex
	reasons map[string]bool

	busySince atomic.Int64 // unix nanoseconds when the pass in progress started; 0 when idle
}

// PassFunc does one pass. changed reports that it had to change something (a repair, a reload); only
// damping looks at it.
type PassFunc func(ctx context.Context, reasons []string) (changed bool, err error)

// Damping configures how a runner backs off from a fight. The zero value never damps.
type Damping struct {
	After  int           // passes in a row that changed something, each within Window of the last, before damping
	Window time.Duration // how close two changing passes must be to count as one fight
	Min    time.Duration // the first damped wait; each further changing pass doubles it
	Max    time.Duration // the cap
	// OnDamp is called with the wait whenever a pass is damped, and with 0 when a fight ends.
	OnDamp func(wait time.Duration, streak int)
}

// Config configures a runner. Zero backoff values default to 10 ms and MaxInterval/4.
type Config struct {
	MinInterval, MaxInterval time.Duration
	BackoffMin, BackoffMax   time.Duration
	Damp                     Damping
	Clock                    clock.Clock // nil: the real clock
}

// New returns a runner for pass; start it with Run.
func New(cfg Config, pass PassFunc) *Runner {
	r := &Runner{
		pass: pass, minInterval: cfg.MinInterval, maxInterval: cfg.MaxInterval,
		backoffMin: cfg.BackoffMin, backoffMax: cfg.BackoffMax, damp: cfg.Damp, clock: cfg.Clock,
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

// Busy reports how long the pass in progress has been running; ok is false when none runs.
func (r *Runner) Busy() (d time.Duration, ok bool) {
	since := r.busySince.Load()
	if since == 0 {
		return 0, false
	}
	return r.clock.Since(time.Unix(0, since)), true
}

// Run runs passes until ctx is done. A pass that fails is retried; Run itself never fails.
func (r *Runner) Run(ctx context.Context) {
	var lastRun, retryAt, lastChange time.Time
	failures, streak := 0, 0
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
		gap := r.minInterval
		if d := r.damped(streak); d > gap {
			gap = d
		}
		if since := r.clock.Since(lastRun); !lastRun.IsZero() && since < gap {
			if !r.sleep(ctx, gap-since) {
				return
			}
		}
		select {
		case <-r.kick: // triggers that arrived while waiting out the gap are served by this pass
		default:
		}
		r.busySince.Store(r.clock.Now().UnixNano())
		changed, err := r.pass(ctx, r.takeReasons())
		r.busySince.Store(0)
		lastRun = r.clock.Now()
		nextPeriodic = lastRun.Add(r.maxInterval)
		streak = r.fight(streak, changed && err == nil, lastRun, &lastChange)
		if err == nil {
			failures, retryAt = 0, time.Time{}
			continue
		}
		backoff := r.backoffMin << min(failures, 30)
		failures++
		retryAt = lastRun.Add(min(backoff, r.backoffMax))
	}
}

// fight updates the streak of changing passes after a pass at now.
func (r *Runner) fight(streak int, changed bool, now time.Time, lastChange *time.Time) int {
	if r.damp.After <= 0 {
		return 0
	}
	switch {
	case !changed:
		if streak >= r.damp.After && r.damp.OnDamp != nil {
			r.damp.OnDamp(0, streak)
		}
		return 0
	case !lastChange.IsZero() && now.Sub(*lastChange) <= r.damp.Window:
		streak++
	default:
		streak = 1
	}
	*lastChange = now
	if d := r.damped(streak); d > 0 && r.damp.OnDamp != nil {
		r.damp.OnDamp(d, streak)
	}
	return streak
}

// damped is the wait before the next pass after streak changing passes in a row.
func (r *Runner) damped(streak int) time.Duration {
	if r.damp.After <= 0 || streak < r.damp.After {
		return 0
	}
	return min(r.damp.Min<<min(streak-r.damp.After, 30), r.damp.Max)
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

// Clock is the runner's clock, for a caller that schedules its own triggers on the same clock (a test's fake
// clock moves both).
func (r *Runner) Clock() clock.Clock { return r.clock }
