package fastpath

import (
	"fmt"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A panic while the fast path handles a datagram happens in its reader, outside CoreDNS's per-query recovery,
// and would end the process: every node's DNS would stop for a bug in one answer. The reader recovers it per
// datagram instead, counts it, logs it (with its stack, once per burst) and hands the datagram to CoreDNS, whose
// own recovery covers the rest of that query's way.

// panicLogEvery is how often at most a contained panic is logged; the ones in between are counted in the next
// line.
const panicLogEvery = 10 * time.Second

// panicLog rate-limits the logging of contained panics.
type panicLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// contain is deferred around the handling of one datagram q from from: after a panic it counts and logs it and
// hands the datagram to CoreDNS.
func (l *listener) contain(q []byte, from netip.AddrPort) {
	r := recover()
	if r == nil {
		return
	}
	l.metrics.panics.Add(1) // nodelocaldns_fastpath_panics_total
	l.panics.report(l.log, r)
	l.miss.put(q, from)
}

func (pl *panicLog) report(log *zap.Logger, r any) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := time.Now()
	if !pl.last.IsZero() && now.Sub(pl.last) < panicLogEvery {
		pl.suppressed++
		return
	}
	log.Error("fast path recovered from a panic; the query went to coredns", zap.String("panic", fmt.Sprint(r)),
		zap.Int("more since last logged", pl.suppressed), zap.ByteString("stack", debug.Stack()))
	pl.last, pl.suppressed = now, 0
}
