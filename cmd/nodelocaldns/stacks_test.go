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
	for _, idle := range []int{0, 25, 150} {
		release := make(chan struct{})
		for range idle {
			go func() { <-release }()
		}
		runtime.GC()
		before := startingSize()

		st := newStackTuner(zaptest.NewLogger(t))
		var start uint64
		for range 100 {
			runtime.GC()
			start = st.step()
			if start == stackTarget {
				break
			}
		}
		if start != stackTarget {
			t.Errorf("%d idle goroutines: starting stack size %d bytes with %d ballast goroutines (%d before), want %d",
				idle, start, st.ballast, before, stackTarget)
		}
		for range 10 { // and it holds
			runtime.GC()
			if got := st.step(); got != stackTarget {
				t.Errorf("%d idle goroutines: starting stack size moved to %d bytes with %d ballast goroutines", idle, got, st.ballast)
				break
			}
		}
		t.Logf("%d idle goroutines: starting stack %d → %d bytes with %d ballast goroutines", idle, before, start, st.ballast)
		st.stop()
		close(release)
	}
}

// However many goroutines the tuner parks, they cannot lift the starting size past the target: it never has
// to take any back.
func TestStackTunerCannotOvershoot(t *testing.T) {
	st := newStackTuner(zaptest.NewLogger(t))
	defer st.stop()
	st.add(maxBallast)
	runtime.GC() // lets the new goroutines run into their frames
	runtime.GC()
	if got := startingSize(); got != stackTarget {
		t.Fatalf("starting stack size with %d ballast goroutines and little else = %d bytes, want %d", st.ballast, got, stackTarget)
	}
}

func startingSize() uint64 {
	s := []metrics.Sample{{Name: startingStackSize}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
