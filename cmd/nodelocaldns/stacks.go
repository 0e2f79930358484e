package main

import (
	"runtime"
	"runtime/metrics"
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
// Parked goroutines that each hold one large frame raise that average. How many are needed depends on how many
// other goroutines there are, so a stackTuner adds or releases one after a GC until the starting size is
// stackTarget. Their frames hold no pointers, so the GC scans them quickly; the price is their memory, 64 KiB
// each (7 with the idle agent's 25 other goroutines, at most maxBallast).
const (
	stackTarget       = 16 << 10
	ballastFrame      = 64 << 10
	maxBallast        = 64
	stackTuneInterval = time.Second
	startingStackSize = "/gc/stack/starting-size:bytes"
	gcCycles          = "/gc/cycles/total:gc-cycles"
)

// stackTuner keeps the runtime's starting stack size at stackTarget.
type stackTuner struct {
	log     *zap.Logger
	ballast []chan struct{} // one release channel per parked goroutine
	lastGC  uint64
	samples []metrics.Sample
	reached bool // the target was reached once (logged)
}

// newStackTuner parks a first estimate of the goroutines needed: one for every five goroutines running, which
// puts the average near 12 KiB when the others are small. GCs are rare in an idle agent, so without it the
// first queries would wait several cycles for the target.
func newStackTuner(log *zap.Logger) *stackTuner {
	t := &stackTuner{log: log, samples: []metrics.Sample{{Name: gcCycles}, {Name: startingStackSize}}}
	for range min((runtime.NumGoroutine()+4)/5, maxBallast) {
		t.add()
	}
	return t
}

// run adjusts after GCs for the life of the process.
func (t *stackTuner) run() {
	for range time.Tick(stackTuneInterval) {
		t.step()
	}
}

// step adds or releases one ballast goroutine if a GC ran since the last step and left the starting size
// below or above the target. It reports the starting size in effect.
func (t *stackTuner) step() uint64 {
	metrics.Read(t.samples)
	cycles, start := t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64()
	if cycles == t.lastGC {
		return start
	}
	t.lastGC = cycles
	switch {
	case start == stackTarget && !t.reached:
		t.reached = true
		t.log.Info("goroutine stacks sized", zap.Uint64("startbytes", start), zap.Int("ballast", len(t.ballast)))
	case start < stackTarget && len(t.ballast) < maxBallast:
		t.add()
	case start > stackTarget && len(t.ballast) > 0:
		close(t.ballast[len(t.ballast)-1])
		t.ballast = t.ballast[:len(t.ballast)-1]
	}
	if start != stackTarget {
		t.log.Debug("goroutine stacks", zap.Uint64("startbytes", start), zap.Int("ballast", len(t.ballast)))
	}
	return start
}

func (t *stackTuner) add() {
	release := make(chan struct{})
	t.ballast = append(t.ballast, release)
	go holdFrame(release)
}

// holdFrame keeps a ballastFrame-sized frame on its goroutine's stack until release is closed.
//
//go:noinline
func holdFrame(release <-chan struct{}) byte {
	var frame [ballastFrame]byte
	<-release
	return frame[len(frame)-1] // the array is live across the wait, so the frame cannot be optimized away
}
