package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// errNoConn says no connection to the upstream could be opened within the query's time.
var errNoConn = errors.New("upstream: no connection")

// pool holds one kind of flow (TCP or UDP) to one upstream address.
type pool struct {
	u      *Upstream
	stream bool
	netw   string
	opts   Options

	conns atomic.Pointer[[]*conn] // copy on write under mu
	next  atomic.Uint32           // where pick starts scanning, so that ties do not all go to the first

	mu      sync.Mutex
	dialing int
	ready   chan struct{} // closed (and replaced) when a connection is added
	failed  chan struct{} // closed (and replaced) when a dial fails
	renew   int           // connections waiting for a replacement before they drain
	stopped bool
	used    atomic.Int64 // unix nanoseconds of the last query
	// hedges is the hedge budget, in thousandths of a hedge: each query earns hedgeEarn, a hedge costs
	// hedgeCost, and the budget holds at most hedgeBurst. An upstream that is slow for everyone is not sent
	// twice the load; one that is dead for some flows is hedged around.
	hedges atomic.Int64
}

const (
	hedgeEarn  = 100 // a hedge per ten queries
	hedgeCost  = 1000
	hedgeBurst = 50 * hedgeCost
)

// takeHedge spends one hedge from the budget, if there is one.
func (p *pool) takeHedge() bool {
	for {
		h := p.hedges.Load()
		if h < hedgeCost {
			return false
		}
		if p.hedges.CompareAndSwap(h, h-hedgeCost) {
			return true
		}
	}
}

// earnHedge adds one query's worth to the hedge budget.
func (p *pool) earnHedge() {
	if p.hedges.Load() < hedgeBurst {
		p.hedges.Add(hedgeEarn)
	}
}

func newPool(u *Upstream, stream bool, opts Options) *pool {
	p := &pool{u: u, stream: stream, netw: "udp", opts: opts, ready: make(chan struct{}), failed: make(chan struct{})}
	p.hedges.Store(hedgeBurst / 5)
	if stream {
		p.netw = "tcp"
	}
	p.conns.Store(&[]*conn{})
	return p
}

// list is the pool's connections, live or draining.
func (p *pool) list() []*conn { return *p.conns.Load() }

// pick returns the live connection with the fewest queries in flight, skipping those in skip, or nil.
func (p *pool) pick(skip []attempt) *conn { return p.pickUnder(skip, 1<<30) }

// pickUnder is pick among the connections with fewer than limit queries in flight.
func (p *pool) pickUnder(skip []attempt, limit int32) *conn {
	cs := p.list()
	var best *conn
	start := int(p.next.Add(1))
	for i := range cs {
		c := cs[(start+i)%len(cs)]
		if !c.live() || tried(skip, c) || c.inflight.Load() >= limit {
			continue
		}
		if best == nil || c.inflight.Load() < best.inflight.Load() {
			best = c
		}
	}
	return best
}

// depth is how many queries a connection may carry at once before another is opened. CoreDNS's server (and
// miekg/dns's) answers the queries of one TCP connection one after the other, so a query queued behind d others
// waits d of the upstream's service times: a pipeline pays only while those are short. It is deep enough to
// add at most about pipelineBudget of waiting; UDP has no such queue.
func (p *pool) depth() int32 {
	if !p.stream {
		return 1 << 30
	}
	s := p.u.rtt.get()
	if s <= 0 {
		return 1
	}
	return int32(min(max(1+int64(pipelineBudget/s), 1), maxDepth))
}

const (
	pipelineBudget = 2 * time.Millisecond
	maxDepth       = 8
	// maxConns bounds a pool's connections: above forward's max_concurrent default that the agent writes (250),
	// so the bound that sheds load stays forward's.
	maxConns = 256
)

func tried(as []attempt, c *conn) bool {
	for _, a := range as {
		if a.c == c {
			return true
		}
	}
	return false
}

// live counts the connections taking new queries.
func (p *pool) live() int {
	n := 0
	for _, c := range p.list() {
		if c.live() {
			n++
		}
	}
	return n
}

// fill starts dials until live plus dialing connections reach want (at most the pool's size plus its spare).
func (p *pool) fill(want int) {
	want = min(want, maxConns)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	for n := p.live() + p.dialing; n < want; n++ {
		p.dialing++
		go p.dial()
	}
}

// dial opens one connection, bounded by the upstream's round trips, and adds it to the pool.
func (p *pool) dial() {
	bound := p.u.rtt.dialBound()
	start := time.Now()
	d := net.Dialer{Timeout: bound}
	nc, err := d.Dial(p.netw, p.u.addr)
	p.mu.Lock()
	p.dialing--
	if err != nil || p.stopped {
		close(p.failed)
		p.failed = make(chan struct{})
		p.mu.Unlock()
		if err == nil {
			_ = nc.Close()
		} else {
			p.u.m.dialFailed(p.netw)
		}
		return
	}
	if p.stream {
		// A TCP handshake is one round trip to the pod.
		p.u.rtt.observe(time.Since(start))
	}
	c := newConn(p, nc)
	cs := append(slices.Clone(p.list()), c)
	p.conns.Store(&cs)
	if p.renew > 0 {
		// The new connection replaces the oldest one due: that one drains from now on.
		for _, old := range cs {
			if old.live() && old.renewing.Load() {
				old.draining.Store(true)
				p.renew--
				go old.forget(0, nil) // closes it if nothing is in flight
				break
			}
		}
	}
	close(p.ready)
	p.ready = make(chan struct{})
	p.mu.Unlock()
	p.u.m.dialed(p.netw)
	if p.opts.Observer != nil {
		p.opts.Observer.Dialed(p.netw)
	}
	go c.read()
}

// due says the connection should be replaced: it is past its age, or has carried its share of queries (and is
// old enough that renewing it does not turn into a connection per query).
func (c *conn) due(now time.Time) bool {
	if c.p.opts.MaxAge > 0 && now.After(c.renewAt) {
		return true
	}
	return c.renewAfter > 0 && c.sent.Load() >= c.renewAfter && now.Sub(c.born) >= c.p.opts.MinAge
}

// replace opens a connection to replace one that is due; the old one drains once the new one is up.
func (p *pool) replace() {
	p.mu.Lock()
	p.renew++
	p.mu.Unlock()
	p.fill(p.live() + 1)
}

// remove takes c out of the pool; a connection that died is replaced at once if the pool is in use.
func (p *pool) remove(c *conn, died bool) {
	p.mu.Lock()
	cs := slices.DeleteFunc(slices.Clone(p.list()), func(x *conn) bool { return x == c })
	p.conns.Store(&cs)
	p.mu.Unlock()
	if died {
		p.u.m.died(p.netw)
	}
	if p.inUse() {
		p.fill(p.opts.Conns)
	}
}

// inUse says a query went through the pool within its expiry: an idle pool lets its connections go.
func (p *pool) inUse() bool {
	return time.Since(time.Unix(0, p.used.Load())) < p.opts.Expire
}

// conn returns a live connection not among skip with room in its pipeline; when every one is full it opens
// another and waits for it at most a dial's bound, then takes the least loaded anyway. With none at all it waits
// (until deadline) for a dial.
func (p *pool) conn(skip []attempt, deadline time.Time, t *time.Timer) (*conn, error) {
	for {
		if c := p.pickUnder(skip, p.depth()); c != nil {
			return c, nil
		}
		p.mu.Lock()
		ready, failed, stopped := p.ready, p.failed, p.stopped
		p.mu.Unlock()
		if stopped {
			return nil, fmt.Errorf("%w: transport to %s stopped", errNoConn, p.u.addr)
		}
		p.fill(p.live() + 1)
		busy := p.pick(skip) // a live connection with a full pipeline, if any
		wait := time.Until(deadline)
		if busy != nil {
			wait = min(wait, p.u.rtt.dialBound())
		}
		if wait <= 0 {
			if busy != nil {
				return busy, nil
			}
			return nil, errNoConn
		}
		t.Reset(wait)
		select {
		case <-ready:
		case <-failed:
			if p.pick(skip) == nil && p.dialingNow() == 0 {
				t.Stop()
				return nil, fmt.Errorf("%w: dial %s %s failed", errNoConn, p.netw, p.u.addr)
			}
		case <-t.C:
			if c := p.pick(skip); c != nil {
				return c, nil
			}
			return nil, errNoConn
		}
		t.Stop()
	}
}

func (p *pool) dialingNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dialing
}

// exchange sends q and waits for the first answer until deadline: hedged on another connection when it is late,
// retried at once on another when the connection it waits on dies.
func (p *pool) exchange(ctx context.Context, q *query, deadline time.Time) error {
	p.used.Store(time.Now().UnixNano())
	p.earnHedge()
	if p.live() < p.opts.Conns {
		p.fill(p.opts.Conns)
	}
	defer func() {
		for _, a := range q.attempts[:q.n] {
			a.c.forget(a.id, q)
		}
	}()
	outstanding := 0
	var err error
	send := func(hedge bool) bool {
		if q.n == maxAttempts {
			return false
		}
		var c *conn
		if hedge {
			// A hedge never waits for a dial (the answer to the first send may be on its way): with no other
			// connection open, it opens one for the next hedge and lets this one go.
			if c = p.pick(q.attempts[:q.n]); c == nil {
				p.fill(p.live() + 1)
				return false
			}
		} else {
			var cerr error
			if c, cerr = p.conn(q.attempts[:q.n], deadline, q.timer); cerr != nil {
				err = cerr
				return false
			}
		}
		id, serr := c.send(q)
		if serr != nil {
			err = serr
			return true // try the next connection
		}
		q.attempts[q.n] = attempt{c: c, id: id, sent: time.Now()}
		q.n++
		outstanding++
		if p.opts.Observer != nil {
			p.opts.Observer.Queried(p.netw)
		}
		return true
	}
	for outstanding == 0 {
		if !send(false) || time.Now().After(deadline) {
			if err == nil {
				err = errNoConn
			}
			return err
		}
	}
	hedgeIn := p.u.rtt.hedgeAfter()
	for {
		wait := min(time.Until(deadline), hedgeIn)
		if wait <= 0 {
			return fmt.Errorf("upstream %s: %w", p.u.addr, context.DeadlineExceeded)
		}
		q.timer.Reset(wait)
		select {
		case r := <-q.ch:
			q.timer.Stop()
			if r.err == nil {
				p.answered(q, r.c)
				return nil
			}
			err = r.err
			outstanding--
			// The connection died under the query: retry at once on another.
			for outstanding == 0 {
				if !send(false) {
					return err
				}
			}
		case <-q.timer.C:
			if !time.Now().Before(deadline) {
				return fmt.Errorf("upstream %s: %w", p.u.addr, context.DeadlineExceeded)
			}
			// Late: send it again on another connection, and open a fresh flow if there is no other.
			hedgeIn *= 2
			if !p.takeHedge() {
				continue
			}
			if send(true) {
				p.u.m.hedged(p.netw)
			}
		case <-ctx.Done():
			q.timer.Stop()
			return ctx.Err()
		}
	}
}

// answered records the winning attempt's round trip, and a beat on every connection that held the query longer
// without answering.
func (p *pool) answered(q *query, winner *conn) {
	var won time.Time
	for _, a := range q.attempts[:q.n] {
		if a.c == winner {
			won = a.sent
			p.u.rtt.observe(time.Since(a.sent))
			break
		}
	}
	for _, a := range q.attempts[:q.n] {
		if a.c != winner && a.sent.Before(won) {
			a.c.beat()
		}
	}
}

// maintain renews and expires the pool's connections; the Upstream calls it on its ticker.
func (p *pool) maintain(now time.Time) {
	inUse := p.inUse()
	extra := p.live() - p.opts.Conns
	for _, c := range p.list() {
		switch {
		case extra > 0 && c.live() && c.inflight.Load() == 0 && now.Sub(time.Unix(0, c.lastUsed.Load())) > idleExtra:
			// Opened for a burst that has passed.
			extra--
			c.draining.Store(true)
			c.forget(0, nil)
		case c.draining.Load():
			if now.Sub(time.Unix(0, c.lastUsed.Load())) > drainLimit {
				c.die(errors.New("upstream: draining connection still silent"))
			}
		case !inUse:
			c.draining.Store(true)
			c.forget(0, nil)
		case c.due(now) && c.renewing.CompareAndSwap(false, true):
			p.replace()
		}
	}
}

// idleExtra is how long a connection beyond the pool's size may stay unused before it is closed.
const idleExtra = time.Second

// drainLimit bounds how long a draining connection may keep queries unanswered: forward's whole budget.
const drainLimit = 5 * time.Second

// stop drains every connection: queries in flight are still answered, and for drainLimit a query that still
// arrives (a reload swaps CoreDNS's instances under the queries, and the old one may finish a few) is still
// sent, on a fresh connection if need be. Then every connection is closed, and whatever is unanswered gets the
// error.
func (p *pool) stop() {
	for _, c := range p.list() {
		c.draining.Store(true)
		c.forget(0, nil)
	}
	time.AfterFunc(drainLimit, func() {
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
		for _, c := range p.list() {
			c.die(errors.New("upstream: stopped"))
		}
	})
}
