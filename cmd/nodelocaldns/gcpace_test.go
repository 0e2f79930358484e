package main

import (
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"
)

// fakePacer is a gcPacer over a heap and a clock the test moves.
type fakePacer struct {
	*gcPacer
	allocs, live uint64
	t            time.Time
	sets         []int
}

func newFakePacer(live uint64) *fakePacer {
	f := &fakePacer{live: live, t: time.Unix(1000, 0)}
	f.gcPacer = &gcPacer{base: gcPercent, percent: gcPercent, last: f.t,
		read: func() (uint64, uint64) { return f.allocs, f.live },
		now:  func() time.Time { return f.t },
		set:  func(p int) int { f.sets = append(f.sets, p); return 0 }}
	return f
}

// after allocates n bytes over d and ends a GC cycle.
func (f *fakePacer) after(d time.Duration, n uint64) int {
	f.t = f.t.Add(d)
	f.allocs += n
	f.cycle()
	return f.percent
}

func TestGCPacerFollowsTheAllocationRate(t *testing.T) {
	const mb = 1 << 20
	if gcMinInterval != 250*time.Millisecond || gcMaxHeadroom != 32*mb || gcRateWindow != time.Second {
		t.Fatalf("the figures below are for 250 ms, 32 MiB and a 1 s window, not %v, %d MiB and %v", gcMinInterval, gcMaxHeadroom/mb, gcRateWindow)
	}
	f := newFakePacer(8 * mb)
	// A node's usual misses: 4 MB/s on an 8 MB live heap. Cycles are two seconds apart at GOGC=100 already.
	if p := f.after(2*time.Second, 8*mb); p != gcPercent || len(f.sets) != 0 {
		t.Fatalf("at 4 MB/s the percent is %d (sets %v), want the base %d left alone", p, f.sets, gcPercent)
	}
	// A storm: 80 MB/s. Cycles 250 ms apart want 20 MB of headroom over 8 MB live: 250.
	if p := f.after(time.Second, 80*mb); p != 250 {
		t.Errorf("at 80 MB/s the percent is %d, want 250", p)
	}
	// A heavier one: 320 MB/s would want 80 MB; the headroom stops at gcMaxHeadroom (32 MB): 400.
	if p := f.after(time.Second, 320*mb); p != 400 {
		t.Errorf("at 320 MB/s the percent is %d, want 400 (32 MB over 8 MB live)", p)
	}
	// 76 MB/s: 19 MB of headroom, 238, more than a quarter of 400 below it.
	if p := f.after(time.Second, 76*mb); p != 238 {
		t.Errorf("at 76 MB/s the percent is %d, want 238", p)
	}
	if p := f.after(time.Second, 80*mb); p != 238 {
		t.Errorf("at 80 MB/s after 76 the percent is %d, want 238 kept (250 is within a quarter)", p)
	}
	// A burst shorter than gcRateWindow changes nothing by itself: 30 MB in 100 ms is 300 MB/s, but taken
	// over the window with the second that follows it is 28 MB/s, 7 MB of headroom: back to the base.
	if p := f.after(100*time.Millisecond, 30*mb); p != 238 {
		t.Errorf("after a 100 ms burst the percent is %d, want 238 (no rate taken yet)", p)
	}
	if p := f.after(time.Second, mb); p != gcPercent {
		t.Errorf("over the burst and a quiet second the percent is %d, want the base %d", p, gcPercent)
	}
	// The storm is over: the base stays.
	if p := f.after(10*time.Second, mb); p != gcPercent {
		t.Errorf("at 0.1 MB/s the percent is %d, want the base %d", p, gcPercent)
	}
	if want := []int{250, 400, 238, gcPercent}; !slices.Equal(f.sets, want) {
		t.Errorf("percents set %v, want %v", f.sets, want)
	}
}

func TestGCPacerIgnoresWhatItCannotUse(t *testing.T) {
	f := newFakePacer(0) // no live heap read yet
	if p := f.after(time.Second, 1<<30); p != gcPercent {
		t.Errorf("with no live heap the percent is %d, want the base", p)
	}
	f.live = 8 << 20
	f.allocs = 0 // a counter that went back (cannot happen in the runtime): nothing derived from it
	if p := f.after(time.Second, 0); p != gcPercent {
		t.Errorf("with allocations going back the percent is %d, want the base", p)
	}
	if p := f.after(0, 1<<30); p != gcPercent {
		t.Errorf("with no time elapsed the percent is %d, want the base", p)
	}
}

// TestGCPacerRunsAfterEachCycle: the real pacer is called after GC cycles (it reads the runtime's own
// counters), sets the percent the rate calls for, and puts the base back when stopped.
func TestGCPacerRunsAfterEachCycle(t *testing.T) {
	restoreRuntime(t)
	debug.SetGCPercent(gcPercent)
	p := newGCPacer(gcPercent)
	cycles := make(chan int, 64)
	set := p.set
	p.set = func(v int) int {
		prior := set(v)
		if !p.stopped.Load() {
			cycles <- v
		}
		return prior
	}
	// 256 MB allocated between the pacer's making and the first cycle it sees, which the clock says took a
	// second: far above what keeps cycles gcMinInterval apart at GOGC=100 on this test binary's small heap. (The
	// clock is the test's: on a slow machine the allocations' own time would make the rate whatever the machine
	// is. The pacer starts after them: the GC cycles they cause would each be a second of the test's clock.)
	clock := p.last
	p.now = func() time.Time { clock = clock.Add(gcRateWindow); return clock }
	for range 256 {
		sink = make([]byte, 1<<20)
	}
	p.start()
	deadline := time.After(30 * time.Second)
	for {
		runtime.GC()
		select {
		case v := <-cycles:
			if v <= gcPercent {
				t.Fatalf("after 256 MB allocated at once the pacer set %d, want more than %d", v, gcPercent)
			}
			p.stop()
			if got := debug.SetGCPercent(gcPercent); got != gcPercent {
				t.Errorf("after stop the percent is %d, want the base %d", got, gcPercent)
			}
			return
		case <-deadline:
			t.Fatal("the pacer was not called within 30 s of GC cycles")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var sink []byte
