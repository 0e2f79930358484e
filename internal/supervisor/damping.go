package supervisor

import (
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/runner"
)

// Damping: the fifth repair in a row, each within a second of the last, waits 50 ms, the next 100 ms, up to
// 5 s. One repair, or repairs far apart, are never delayed (internal/runner carries out the waits).
const (
	dampAfter  = 5
	dampWindow = time.Second
	dampMin    = 50 * time.Millisecond
	dampMax    = 5 * time.Second
)

// damping makes the reconcile runner back off from a writer that keeps undoing its repairs, and says so once
// per fight.
func newDamping(log *zap.Logger, m *metrics.Metrics) runner.Damping {
	return runner.Damping{
		After: dampAfter, Window: dampWindow, Min: dampMin, Max: dampMax,
		OnDamp: func(wait time.Duration, streak int) {
			switch {
			case wait == 0:
				log.Info("repairs no longer undone; reconciling at full speed again", zap.Int("repairs_in_a_row", streak))
			case streak == dampAfter:
				log.Warn("another writer keeps undoing our repairs; damping reconcile passes until it stops",
					zap.Int("repairs_in_a_row", streak), zap.Duration("wait", wait), zap.Duration("max_wait", dampMax))
			}
			if wait > 0 {
				m.Damped.Inc()
			}
		},
	}
}
