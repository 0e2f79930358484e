package upstream

import (
	"slices"
	"sync/atomic"
	"time"
)

// Bounds derived from the round trips seen. The upstream is one hop away (kube-dns behind its Service), so a
// handshake or an answer that takes many times the usual is a dead pod more often than a slow one; the bounds
// stay in the low hundreds of milliseconds instead of CoreDNS's adaptive dial timeout, which starts at 30 s on a
// fresh agent (plugin/pkg/proxy, maxDialTimeout). They come from the distribution of recent round trips rather
// than its mean: a loaded upstream's round trips spread out, and a bound set from the mean would hedge (send
// twice) exactly the queries that a busy upstream is about to answer.
const (
	// freshDialBound bounds a dial before any round trip has been seen.
	freshDialBound = 500 * time.Millisecond
	minDialBound   = 100 * time.Millisecond
	maxDialBound   = time.Second
	// A query unanswered after hedgeFactor times the p99 of recent round trips (at least minHedge, at most
	// maxHedge) is sent again on another connection: about one query in a hundred would be late by the
	// p99 alone, and the factor keeps a steady upstream from being hedged at all. freshHedge applies before
	// any round trip has been seen.
	hedgeFactor = 2
	minHedge    = 20 * time.Millisecond
	maxHedge    = 500 * time.Millisecond
	freshHedge  = 100 * time.Millisecond
	// A query that finds every connection's pipeline full waits for a new one dialWaitFactor times the median
	// round trip (a live pod's handshake is one), at least minDialWait, then queues on a full one: a dial that
	// meets a dead pod runs on to its bound (dialBound) without a query behind it. The floor is the hedge's:
	// queued behind a query the upstream answers slowly (it serves a connection's queries one after the other),
	// only a hedge gets it out, and with a 1 ms floor a Corefile forwarding to the agent itself (refused at
	// reload) queued its queries behind their own forwards until the hedges got them out, past a second.
	// freshDialWait applies before any round trip has been seen.
	dialWaitFactor = 2
	minDialWait    = minHedge
	freshDialWait  = 100 * time.Millisecond
)

// Recent round trips are kept in a ring of samples; the percentiles are recomputed from it every recompute
// samples (and at every one of the first ring's worth, so a fresh agent has bounds from its first answers). A
// sort of ringSize integers every recompute answers costs about as much per answer as one map lookup.
const (
	ringSize  = 128
	recompute = 32
)

// latency is what the upstream's recent round trips say, read without a lock on every query.
type latency struct {
	n atomic.Uint64
	// rtt are round trips (handshakes and answers); service are answers' round trips divided by the number of
	// queries that were ahead of them on their connection, plus one: CoreDNS's server answers a connection's
	// queries one after the other, so that is about the upstream's time per query.
	rtt, service [ringSize]atomic.Int64
	// The percentiles, in nanoseconds, 0 before the first sample: p50 and p99 of rtt, and the 10th percentile of
	// service (a low one: a queue in front of the upstream, or in front of our reader, only adds to it).
	p50, p99, serviceLow atomic.Int64
}

// observe records an answer that came back after d, with ahead queries sent before it on its connection still
// unanswered when it was sent.
func (l *latency) observe(d time.Duration, ahead int) {
	d = max(d, time.Microsecond)
	i := l.n.Add(1) - 1
	l.rtt[i%ringSize].Store(int64(d))
	l.service[i%ringSize].Store(int64(d) / int64(ahead+1))
	if i < ringSize || i%recompute == 0 {
		l.update(min(i+1, ringSize))
	}
}

// observeDial records a TCP handshake: one round trip, no service time.
func (l *latency) observeDial(d time.Duration) {
	d = max(d, time.Microsecond)
	i := l.n.Add(1) - 1
	l.rtt[i%ringSize].Store(int64(d))
	// The handshake says nothing of the service time: the slot keeps the sample it had (0 at first, which
	// update skips).
	if i < ringSize || i%recompute == 0 {
		l.update(min(i+1, ringSize))
	}
}

// update recomputes the percentiles from the first n samples of the ring. Two updates may race; each stores a
// consistent set from samples that were all seen.
func (l *latency) update(n uint64) {
	var buf [ringSize]int64
	s := buf[:0]
	for i := range n {
		s = append(s, l.rtt[i].Load())
	}
	slices.Sort(s)
	l.p50.Store(s[len(s)/2])
	l.p99.Store(s[len(s)*99/100])
	s = buf[:0]
	for i := range n {
		if v := l.service[i].Load(); v > 0 {
			s = append(s, v)
		}
	}
	if len(s) > 0 {
		slices.Sort(s)
		l.serviceLow.Store(s[len(s)/10])
	}
}

// median is the median of recent round trips, 0 before the first.
func (l *latency) median() time.Duration { return time.Duration(l.p50.Load()) }

// dialBound is how long a dial may take: four times the p99 of recent round trips, within [minDialBound,
// maxDialBound].
func (l *latency) dialBound() time.Duration {
	p := l.p99.Load()
	if p == 0 {
		return freshDialBound
	}
	return min(max(4*time.Duration(p), minDialBound), maxDialBound)
}

// dialWait is how long a query waits for a new connection before it queues on a full one, or, with none open,
// before one more dial is started: dialWaitFactor times the median round trip, within [minDialWait, dialBound].
func (l *latency) dialWait() time.Duration {
	m := l.p50.Load()
	if m == 0 {
		return freshDialWait
	}
	return min(max(dialWaitFactor*time.Duration(m), minDialWait), l.dialBound())
}

// hedgeAfter is how long a query waits for its answer before it is also sent on another connection.
func (l *latency) hedgeAfter() time.Duration {
	p := l.p99.Load()
	if p == 0 {
		return freshHedge
	}
	return min(max(hedgeFactor*time.Duration(p), minHedge), maxHedge)
}

// serviceTime is the upstream's time per query on one connection, 0 before the first answer.
func (l *latency) serviceTime() time.Duration { return time.Duration(l.serviceLow.Load()) }
