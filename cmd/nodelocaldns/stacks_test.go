package main

import (
	"runtime"
	"runtime/metrics"
	"testing"

	"go.uber.org/zap/zaptest"
)

// The tuner must bring the runtime's starting stack size to the target and hold it there, whatever the
// number of other goroutines parked on small stacks (the idle agent has about 25).
func TestStackTunerReachesTarget(t *testing.T) {
	for _, idle := range []int{0, 25, 200} {
		release := make(chan struct{})
		for range idle {
			go func() { <-release }()
		}
		runtime.GC()
		before := startingSize()

		st := newStackTuner(zaptest.NewLogger(t))
		var start uint64
		for range 2 * maxBallast {
			runtime.GC()
			start = st.step()
			if start == stackTarget {
				break
			}
		}
		runtime.GC()
		if got := st.step(); start != stackTarget || got != stackTarget {
			t.Errorf("%d idle goroutines: starting stack size %d then %d bytes with %d ballast goroutines (%d before), want %d",
				idle, start, got, len(st.ballast), before, stackTarget)
		} else {
			t.Logf("%d idle goroutines: starting stack %d → %d bytes with %d ballast goroutines", idle, before, got, len(st.ballast))
		}
		for _, c := range st.ballast {
			close(c)
		}
		close(release)
	}
}

func startingSize() uint64 {
	s := []metrics.Sample{{Name: startingStackSize}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
