package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Goroutine stacks sized for a DNS query.
//
// CoreDNS's UDP server (miekg/dns) starts a goroutine for every query, and the standard Corefile's plugin chain
// needs a little over 8 KiB of stack to answer from cache. A new goroutine gets the runtime's "starting stack
// size", which the runtime recomputes at every GC as the average stack in use across the goroutines it scanned
// (adaptive stack start, Go 1.19: https://go.dev/doc/go1.19#runtime), rounded up to a power of two. In this
// agent most goroutines are idle loops using well under 1 KiB, so each query's goroutine starts at 2 KiB and
// grows three times, copying its stack each time (runtime.newstack/copystack): 12.7% of the CPU under the
// bench's load, 1.6% once queries start at 16 KiB (docs/performance.md has both profiles).
//
// Parked goroutines that each hold one 13 KiB frame raise that average. How many are needed depends on how many
// other goroutines there are, so a stackTuner adds some after a GC that left the starting size below
// stackTarget. A parked goroutine uses under 14 KiB, so no number of them can lift the average plus the
// runtime's guard (928 bytes) past 16 KiB: the starting size never overshoots, and the tuner never has to take
// any back. Their frames hold no pointers, so the GC scans them quickly; the price is their memory, 16 KiB of
// stack each: 30 to 40 for the idle agent's 25 other goroutines (~0.6 MiB), at most maxBallast (4 MiB), which
// reaches the target with up to about 200 other goroutines.
const (
	stackTarget       = 16 << 10
	ballastFrame      = 13 << 10
	maxBallast        = 256
	stackTuneInterval = time.Second
	startingStackSize = "/gc/stack/starting-size:bytes"
	gcCycles          = "/gc/cycles/total:gc-cycles"
)

// stackTuner raises the runtime's starting stack size to stackTarget. A tuner that found the runtime unable to
// use it (see newStackTuner) is inert: it parks nothing and Run returns at once.
type stackTuner struct {
	log     *zap.Logger
	inert   bool
	ballast int           // goroutines parked
	release chan struct{} // closed by stop
	lastGC  uint64
	samples []metrics.Sample
	reached bool // the target was reached once (logged)
}

// newStackTuner parks a first estimate of the goroutines needed, 1.2 per goroutine running. GCs are rare in an
// idle agent, so without it the first queries would wait several cycles for the target.
func newStackTuner(log *zap.Logger) *stackTuner { return newStackTunerEnv(log, os.Getenv) }

// newStackTunerEnv is newStackTuner reading GODEBUG through getenv. It checks once, before parking anything, what
// the tuner relies on, and returns an inert tuner (saying why) when
//   - the runtime lacks either metric or reports it as another kind: Value.Uint64 panics on any kind but
//     KindUint64, and a Go release may drop or retype a metric (runtime/metrics promises no stability);
//   - GODEBUG turns the heuristic off (adaptivestackstart=0): every goroutine then starts at the fixed 2 KiB, so
//     parked frames would only cost memory.
func newStackTunerEnv(log *zap.Logger, getenv func(string) string) *stackTuner {
	t := &stackTuner{log: log, release: make(chan struct{}), samples: []metrics.Sample{{Name: gcCycles}, {Name: startingStackSize}}}
	if err := checkUint64Metrics(t.samples); err != nil {
		t.inert = true
		log.Info("goroutine stacks not tuned: the runtime does not report what the tuner reads", zap.Error(err))
		return t
	}
	if godebug(getenv("GODEBUG"), "adaptivestackstart") == "0" {
		t.inert = true
		log.Info("goroutine stacks not tuned: GODEBUG adaptivestackstart=0 turns the runtime's heuristic off")
		return t
	}
	t.add(runtime.NumGoroutine() * 6 / 5)
	return t
}

// checkUint64Metrics reads samples once and reports any that is not a uint64.
func checkUint64Metrics(samples []metrics.Sample) error {
	metrics.Read(samples)
	for _, s := range samples {
		if k := s.Value.Kind(); k != metrics.KindUint64 {
			if k == metrics.KindBad {
				return fmt.Errorf("runtime metric %s: not supported by this Go release", s.Name)
			}
			return fmt.Errorf("runtime metric %s: kind %d, want uint64", s.Name, k)
		}
	}
	return nil
}

// godebug returns the value of key in a GODEBUG string ("k=v,k=v"; the last one wins, as for the runtime).
func godebug(env, key string) string {
	v := ""
	for _, kv := range strings.Split(env, ",") {
		if k, val, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == key {
			v = val
		}
	}
	return v
}

// Run adjusts after GCs until ctx is done, then releases the parked goroutines.
func (t *stackTuner) Run(ctx context.Context) {
	defer t.stop()
	if t.inert {
		return
	}
	tick := time.NewTicker(stackTuneInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.step()
		}
	}
}

// step parks more goroutines if a GC ran since the last step and left the starting size below the target:
// one for every eight running, so that a tuner started before the agent's goroutines catches up in a few
// cycles. It reports the starting size in effect.
func (t *stackTuner) step() uint64 {
	metrics.Read(t.samples)
	cycles, start := t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64()
	if cycles == t.lastGC {
		return start
	}
	t.lastGC = cycles
	switch {
	case start >= stackTarget && !t.reached:
		t.reached = true
		t.log.Info("goroutine stacks sized", zap.Uint64("startbytes", start), zap.Int("ballast", t.ballast))
	case start < stackTarget:
		t.add(max(1, runtime.NumGoroutine()/8))
		t.log.Debug("goroutine stacks", zap.Uint64("startbytes", start), zap.Int("ballast", t.ballast))
	}
	return start
}

// add parks n more goroutines, up to maxBallast.
func (t *stackTuner) add(n int) {
	for range min(n, maxBallast-t.ballast) {
		t.ballast++
		go holdFrame(t.release)
	}
}

// stop releases the parked goroutines. Run calls it when it returns; call it at most once.
func (t *stackTuner) stop() { close(t.release) }

// holdFrame keeps a ballastFrame-sized frame on its goroutine's stack until release is closed.
//
//go:noinline
func holdFrame(release <-chan struct{}) byte {
	var frame [ballastFrame]byte
	<-release
	return frame[len(frame)-1] // the array is live across the wait, so the frame cannot be optimized away
}
