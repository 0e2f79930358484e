package main

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// The GC percent follows the allocation rate. A cache hit allocates nothing (internal/fastpath) and a node's
// misses are usually a few hundred a second, so at GOGC=100 a cycle is rare and the heap stays small, which the
// memory-limited pods need. A storm of misses (an NXDOMAIN storm from ndots:5 search lists, a flood of unique
// names) allocates a couple of KiB each: at 35,000 a second GOGC=100 ran a cycle every 100 ms on an 8 MB live
// heap, each taking 60% of the agent's one CPU for about 7 ms, and the misses' p99 was the GC's (1.3-1.4x
// unbound's in bench/serve, 0.9x with the GC off). So while the heap is allocated fast, the percent rises until
// cycles are gcMinInterval apart, but the heap beyond the live one never grows past gcMaxHeadroom for it; when
// the rate falls, it falls back. It is recomputed at the end of every GC cycle, from when the agent serves (start-up's
// garbage is not a storm): an idle agent does no work for it.
//
// The interval is a memory trade: 500 ms took the bench's miss p99 from 1.34x unbound's to 1.08x, but a flood of
// 10,000 refused misses a second (test/e2e/outage) then held 11 MB more heap, its peak RSS 1.9x its idle against
// 1.4x before (the test's bound is 2x); 250 ms halves that (1.6x) and keeps most of the gain (1.40x to 1.23x).
const (
	gcMinInterval = 250 * time.Millisecond
	gcMaxHeadroom = 32 << 20
	// The rate is taken over at least gcRateWindow of cycles: a burst shorter than that (the agent's first
	// scrape, a reload's set-up) is not a storm, and once raised the percent would stay until the next cycle,
	// which an idle agent runs only every two minutes.
	gcRateWindow = time.Second
	// A new percent is applied only when it differs from the one in effect by more than a quarter of it.
	gcPercentSlack = 4
)

// gcPacer sets the GC percent from the allocation rate between GC cycles.
type gcPacer struct {
	base    int                           // the percent with no storm (gcPercent)
	read    func() (allocs, live uint64)  // bytes allocated since the start, and the live heap
	now     func() time.Time              // time.Now
	set     func(percent int) (prior int) // debug.SetGCPercent
	percent int                           // in effect

	mu         sync.Mutex // cycle against stop
	last       time.Time
	lastAllocs uint64
	stopped    atomic.Bool
}

func newGCPacer(base int) *gcPacer {
	p := &gcPacer{base: base, read: readHeap, now: time.Now, set: debug.SetGCPercent, percent: base}
	p.last = p.now()
	p.lastAllocs, _ = p.read()
	return p
}

// runGCPacer paces the GC from the base percent while ctx lasts (a supervisor.Actor's Run, from when the
// agent serves), then puts the base back.
func runGCPacer(base int) func(ctx context.Context) {
	return func(ctx context.Context) {
		p := newGCPacer(base)
		p.start()
		<-ctx.Done()
		p.stop()
	}
}

// start recomputes the percent after every GC cycle from now on.
func (p *gcPacer) start() { p.arm() }

// stop ends the recomputing (at the next cycle) and puts the base percent back.
func (p *gcPacer) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped.Store(true)
	p.set(p.base)
}

// gcSentinel is garbage whose finalizer runs once a GC cycle has found it unreachable: the next cycle. Its
// pointer keeps it out of the tiny allocator, whose blocks may hold a finalized object for ever.
type gcSentinel struct{ p *gcPacer }

func (p *gcPacer) arm() {
	runtime.SetFinalizer(&gcSentinel{p: p}, func(s *gcSentinel) {
		if s.p.stopped.Load() {
			return
		}
		s.p.cycle()
		s.p.arm()
	})
}

// cycle applies the percent that the allocations since the last cycle call for.
func (p *gcPacer) cycle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped.Load() {
		return
	}
	allocs, live := p.read()
	now := p.now()
	if now.Sub(p.last) < gcRateWindow {
		return // the rate is taken over the cycles since p.last, at the first one gcRateWindow after it
	}
	want := p.next(allocs, live, now.Sub(p.last))
	p.last, p.lastAllocs = now, allocs
	if abs(want-p.percent) > p.percent/gcPercentSlack {
		p.set(want)
		p.percent = want
	}
}

// next is the percent that keeps cycles gcMinInterval apart at the rate of allocs since the last cycle, within
// gcMaxHeadroom beyond the live heap, and never below the base.
func (p *gcPacer) next(allocs, live uint64, elapsed time.Duration) int {
	if elapsed <= 0 || live == 0 || allocs < p.lastAllocs {
		return p.percent
	}
	rate := float64(allocs-p.lastAllocs) / elapsed.Seconds()
	headroom := min(rate*gcMinInterval.Seconds(), gcMaxHeadroom)
	return max(int(math.Ceil(100*headroom/float64(live))), p.base)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// readHeap reads the bytes allocated since the start and the live heap (as of the last GC) from the runtime.
func readHeap() (allocs, live uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		allocs = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		live = s[1].Value.Uint64()
	}
	return allocs, live
}
