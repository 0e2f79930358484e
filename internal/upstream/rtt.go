package upstream

import (
	"sync/atomic"
	"time"
)

// Bounds derived from the round trips seen. The upstream is one hop away (kube-dns behind its Service), so a
// handshake or an answer that takes many times the usual is a dead pod more often than a slow one; the bounds
// stay in the low hundreds of milliseconds instead of CoreDNS's adaptive dial timeout, which starts at 30 s on a
// fresh agent (plugin/pkg/proxy, maxDialTimeout).
const (
	// freshDialBound bounds a dial before any round trip has been seen.
	freshDialBound = 500 * time.Millisecond
	minDialBound   = 100 * time.Millisecond
	maxDialBound   = time.Second
	// A query unanswered after hedgeFactor smoothed round trips (at least minHedge, at most maxHedge) is sent
	// again on another connection. freshHedge applies before any round trip has been seen.
	hedgeFactor = 3
	minHedge    = 20 * time.Millisecond
	maxHedge    = 500 * time.Millisecond
	freshHedge  = 100 * time.Millisecond
)

// rtt is a smoothed round-trip time (RFC 6298's SRTT with alpha 1/8), updated without a lock.
type rtt struct {
	srtt atomic.Int64 // nanoseconds; 0 until the first sample
}

// observe folds one sample in.
func (r *rtt) observe(d time.Duration) {
	if d <= 0 {
		d = time.Microsecond
	}
	for {
		old := r.srtt.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if r.srtt.CompareAndSwap(old, next) {
			return
		}
	}
}

// get is the smoothed round-trip time, or 0 before the first sample.
func (r *rtt) get() time.Duration { return time.Duration(r.srtt.Load()) }

// dialBound is how long a dial may take: four round trips, within [minDialBound, maxDialBound].
func (r *rtt) dialBound() time.Duration {
	s := r.get()
	if s == 0 {
		return freshDialBound
	}
	return min(max(4*s, minDialBound), maxDialBound)
}

// hedgeAfter is how long a query waits for its answer before it is also sent on another connection.
func (r *rtt) hedgeAfter() time.Duration {
	s := r.get()
	if s == 0 {
		return freshHedge
	}
	return min(max(hedgeFactor*s, minHedge), maxHedge)
}

// atomicBool is sync/atomic's Bool, named here so query stays a plain struct to read.
type atomicBool = atomic.Bool
