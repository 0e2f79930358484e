package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// The tuner must bring the runtime's starting stack size to the target and hold it there, whatever the
// number of other goroutines parked on small stacks (the idle agent has about 25).
func TestStackTunerReachesTarget(t *testing.T) {
	for _, idle := range []int{0, 25, 150} {
		goroutines := runtime.NumGoroutine()
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
		close(release)
		stopTuner(t, st, goroutines)
	}
}

// However many goroutines the tuner parks, they cannot lift the starting size past the target: it never has
// to take any back.
func TestStackTunerCannotOvershoot(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	st := newStackTuner(zaptest.NewLogger(t))
	defer stopTuner(t, st, goroutines)
	st.add(maxBallast)
	runtime.GC() // lets the new goroutines run into their frames
	runtime.GC()
	if got := startingSize(); got != stackTarget {
		t.Fatalf("starting stack size with %d ballast goroutines and little else = %d bytes, want %d", st.ballast, got, stackTarget)
	}
}

// stopTuner releases st's ballast and waits until the goroutines are back to before, so that the next test counts
// from a quiet runtime: TestStackTunerStops takes its baseline from runtime.NumGoroutine, and released goroutines
// exit slowly under emulation (make test-arm64), where that baseline raced with the exits.
func stopTuner(t *testing.T, st *stackTuner, before int) {
	t.Helper()
	st.stop()
	testenv.Eventually(t, 5*time.Second, "the released ballast goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

func startingSize() uint64 {
	s := []metrics.Sample{{Name: startingStackSize}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// What the tuner reads is checked once, up front: a metric this Go release lacks, or reports as another kind,
// makes it inert instead of panicking later in Value.Uint64.
func TestCheckUint64Metrics(t *testing.T) {
	if err := checkUint64Metrics([]metrics.Sample{{Name: gcCycles}, {Name: startingStackSize}}); err != nil {
		t.Fatalf("the tuner's metrics: %v", err)
	}
	for name, want := range map[string]string{
		"/gc/stack/no-such-metric:bytes":    "not supported",
		"/cpu/classes/gc/total:cpu-seconds": "want uint64", // a float64 metric
	} {
		err := checkUint64Metrics([]metrics.Sample{{Name: gcCycles}, {Name: name}})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: got %v, want an error naming it and containing %q", name, err, want)
		}
	}
}

func TestGodebug(t *testing.T) {
	for env, want := range map[string]string{
		"":                                "",
		"adaptivestackstart=0":            "0",
		"gctrace=1, adaptivestackstart=0": "0",
		"adaptivestackstart=0,adaptivestackstart=1": "1",
		"xadaptivestackstart=0":                     "",
	} {
		if got := godebug(env, "adaptivestackstart"); got != want {
			t.Errorf("godebug(%q) = %q, want %q", env, got, want)
		}
	}
}

// With GODEBUG=adaptivestackstart=0 the tuner parks nothing and Run returns at once.
func TestStackTunerInertWithoutHeuristic(t *testing.T) {
	before := runtime.NumGoroutine()
	st := newStackTunerEnv(zaptest.NewLogger(t), func(k string) string {
		if k == "GODEBUG" {
			return "gctrace=0,adaptivestackstart=0"
		}
		return ""
	})
	if !st.inert || st.ballast != 0 {
		t.Fatalf("tuner inert=%v with %d ballast goroutines, want inert with none", st.inert, st.ballast)
	}
	done := make(chan struct{})
	go func() { st.Run(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an inert tuner's Run did not return")
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after an inert tuner, %d before", n, before)
	}
}

// The premise of the above, on the real runtime: with the heuristic off, even the most ballast leaves new
// goroutines at the fixed 2 KiB start. Checked in a child process, since GODEBUG is read at start-up.
func TestAdaptiveStackStartOffIgnoresBallast(t *testing.T) {
	if os.Getenv("STACKS_TEST_CHILD") == "1" {
		st := newStackTunerEnv(zaptest.NewLogger(t), func(string) string { return "" }) // parks regardless
		defer st.stop()
		st.add(maxBallast)
		runtime.GC()
		runtime.GC()
		fmt.Printf("starting-size=%d\n", startingSize())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAdaptiveStackStartOffIgnoresBallast$", "-test.v")
	cmd.Env = append(os.Environ(), "STACKS_TEST_CHILD=1", "GODEBUG=adaptivestackstart=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "starting-size=2048\n") {
		t.Fatalf("with GODEBUG=adaptivestackstart=0 and %d ballast goroutines, want the fixed 2048-byte start:\n%s", maxBallast, out)
	}
}

// The tuner stops: Run returns when its context is cancelled (the supervisor's background stop), and its
// parked goroutines exit.
func TestStackTunerStops(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { newStackTuner(zaptest.NewLogger(t)).Run(ctx); close(ran) }()
	stop := func() { cancel(); <-ran }
	testenv.Eventually(t, 5*time.Second, "the tuner to park goroutines", func() bool { return runtime.NumGoroutine() > before+1 })
	if n := runtime.NumGoroutine(); n <= before {
		t.Fatalf("%d goroutines with the tuner running, %d before: nothing parked", n, before)
	}
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return")
	}
	testenv.Eventually(t, 5*time.Second, "parked goroutines exit", func() bool { return runtime.NumGoroutine() <= before })
}
