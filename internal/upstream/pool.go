package upstream

import (
	"context"
	"errors"
	"fmt"
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

	mu       sync.Mutex
	dialing  int
	lastDial time.Time     // when the latest dial began
	ready    chan struct{} // closed (and replaced) when a connection is added
	failed   chan struct{} // closed (and replaced) when a dial fails
	stopped  bool

	used atomic.Int64 // unix nanoseconds of the last query
	// renew counts the connections waiting for a replacement before they drain; a renewal waits until the
	// previous one's replacement is up.
	renew atomic.Int32
	// Renewal (Options.RenewQueries): queries since the last renewal, when it was, and when the oldest
	// connection is due whatever the count (MaxAge), all in unix nanoseconds.
	sinceRenew atomic.Uint64
	lastRenew  atomic.Int64
	ageDue     atomic.Int64
	// expiry closes the pool's connections once it has been unused for Options.Expire. A query arms it when it
	// is not armed; when it fires on a pool still in use, it re-arms itself for the rest of the time.
	expiry      *time.Timer
	expiryArmed atomic.Bool

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
	p.expiry = time.AfterFunc(time.Hour, p.expire)
	p.expiry.Stop()
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
// add at most about pipelineBudget of waiting; UDP has no such queue. The service time is a low percentile of
// round trips divided by the queries ahead (latency.serviceTime), not the round trip itself: under load the
// round trip grows with queues (ours, the kernel's) that a deeper pipeline shortens, and a depth taken from it
// would open a connection per query just when reading several answers at once pays most.
func (p *pool) depth() int32 {
	if !p.stream {
		return 1 << 30
	}
	s := p.u.lat.serviceTime()
	if s <= 0 {
		return 1
	}
	return int32(min(max(1+int64(pipelineBudget/s), 1), maxDepth))
}

const (
	pipelineBudget = 2 * time.Millisecond
	maxDepth       = 32
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
		p.lastDial = time.Now()
		go p.dial()
	}
}

// dialMore starts one more dial when none began within after: the ones pending may all be to a dead pod,
// whose silent handshake only dialBound ends, and kube-proxy places each new flow on its own. At most
// maxDialing dials are pending: with every pod silent (an outage), the queries waiting must not turn into a
// stream of SYNs, each a conntrack entry on the node for minutes.
func (p *pool) dialMore(after time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.dialing >= p.maxDialing() || p.live()+p.dialing >= maxConns || time.Since(p.lastDial) < after {
		return
	}
	p.dialing++
	p.lastDial = time.Now()
	go p.dial()
}

// maxDialing bounds the dials dialMore lets be pending: twice the pool's size.
func (p *pool) maxDialing() int { return 2 * p.opts.Conns }

// dial opens one connection, bounded by the upstream's round trips, and adds it to the pool.
func (p *pool) dial() {
	bound := p.u.lat.dialBound()
	start := time.Now()
	nc, err := p.u.dial(p.netw, p.u.addr, bound)
	p.mu.Lock()
	p.dialing--
	// A dial that ends after the pool expired (nobody asked for Expire) is not kept: no timer would close it.
	if err != nil || p.stopped || !p.inUse() {
		close(p.failed)
		p.failed = make(chan struct{})
		p.mu.Unlock()
		if err == nil {
			_ = nc.Close()
		} else {
			p.u.m.dialFailed(p.netw)
		}
		p.renewFailed()
		return
	}
	if p.stream {
		// A TCP handshake is one round trip to the pod.
		p.u.lat.observeDial(time.Since(start))
	}
	c := newConn(p, nc, time.Now().UnixNano())
	cs := append(slices.Clone(p.list()), c)
	p.conns.Store(&cs)
	if p.renew.Load() > 0 {
		// The new connection replaces the oldest one due: that one drains from now on. With none left (it died
		// meanwhile), no renewal is pending any more.
		replaced := false
		for _, old := range cs {
			if old.live() && old.renewing.Load() && old.startDrain() {
				go old.forget(0, nil)
				replaced = true
				break
			}
		}
		if replaced {
			p.renew.Add(-1)
		} else {
			p.renew.Store(0)
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

// renewFailed forgets the renewals pending when a dial failed: the connections due stay live and are picked
// again by a later renewal, which then dials again, instead of waiting for a replacement that never comes.
func (p *pool) renewFailed() {
	if p.renew.Swap(0) == 0 {
		return
	}
	for _, c := range p.list() {
		c.renewing.Store(false)
	}
}

// replace opens a connection to replace one that is due; the old one drains once the new one is up.
func (p *pool) replace() {
	p.renew.Add(1)
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

// expire runs on the pool's expiry timer: a pool unused for Options.Expire drains its connections and stays
// unarmed until the next query; one still in use re-arms for the rest of the time.
func (p *pool) expire() {
	p.expiryArmed.Store(false)
	idle := time.Since(time.Unix(0, p.used.Load()))
	if idle < p.opts.Expire {
		if p.expiryArmed.CompareAndSwap(false, true) {
			p.expiry.Reset(p.opts.Expire - idle)
		}
		return
	}
	for _, c := range p.list() {
		c.drain()
	}
}

// renewIfDue renews one connection when the pool has carried RenewQueries queries since the last renewal, or
// when its oldest is due by MaxAge, and RenewGap has passed since the last one. It runs on the query path, so
// a pool renews only while it is asked.
func (p *pool) renewIfDue(now int64) {
	if p.sinceRenew.Add(1) < p.opts.RenewQueries && now < p.ageDue.Load() || p.renew.Load() > 0 {
		return
	}
	last := p.lastRenew.Load()
	if now-last < int64(p.opts.RenewGap) || !p.lastRenew.CompareAndSwap(last, now) {
		return
	}
	p.sinceRenew.Store(0)
	p.ageDue.Store(now + int64(jitter(p.opts.MaxAge/time.Duration(p.opts.Conns))))
	p.renewOne(now)
}

// renewOne drains a connection beyond the pool's size that is no longer needed (idle for idleExtra, or the
// least loaded while the others have room for twice what is in flight), or else replaces the oldest live one:
// the replacement is opened first, and the old one drains once it is up.
func (p *pool) renewOne(now int64) {
	cs := p.list()
	var oldest *conn
	live := 0
	for _, c := range cs {
		if !c.live() {
			continue
		}
		live++
		if !c.renewing.Load() && (oldest == nil || c.born < oldest.born) {
			oldest = c
		}
	}
	if live > p.opts.Conns {
		var inflight int64
		for _, c := range cs {
			if !c.live() {
				continue
			}
			n := c.inflight.Load()
			if n == 0 && now-c.lastUsed.Load() > int64(idleExtra) {
				c.drain()
				return
			}
			inflight += int64(n)
		}
		// Under a steady load every connection is picked in turn and none is ever idle, so the connections a
		// burst (or a moment of deep queues) opened would stay for as long as the load lasts, each a reader
		// and its system calls for fewer answers: the least loaded goes once the others could carry what is in
		// flight at half their depth. (No renewal is pending here: renewIfDue waits for the last one's.)
		if 2*inflight <= int64(live-1)*int64(p.depth()) {
			if c := p.pick(nil); c != nil {
				c.drain()
				return
			}
		}
	}
	if oldest != nil && oldest.renewing.CompareAndSwap(false, true) {
		p.u.m.Renewals.Add(1)
		p.replace()
	}
}

// dialFailuresPerWait is how many failed dials a query waiting for a connection sees, with nothing else live or
// pending, before it fails. One was too few: kube-proxy places each new flow on its own, so with one pod of
// three silent a third of the dials meet it, and a moment with no connection live (every one taken out, a busy
// machine's hedges beating them) then failed the queries waiting whose deadline still had room for a dial to a
// live pod. Three keeps an outage's failures prompt: each of forward's attempts sees at most three dials' bounds,
// and the dials are one at a time, so a refusing upstream is not sent a stream of SYNs.
const dialFailuresPerWait = 3

// idleExtra is how long a connection beyond the pool's size may stay unused before a renewal closes it.
const idleExtra = time.Second

// conn returns a live connection not among skip with room in its pipeline. When every one is full it opens
// another (one dial at a time: one per waiting query made the pipelines shallow, and a saturating miss load
// cost 7% more in two bench runs) and waits for it as long as queueing on the least loaded one would take, the
// queries ahead there times the upstream's service time, and at least a live pod's handshake (dialWait); then it
// takes that one anyway: a dial that meets a dead pod holds no query past that. With none open it waits (until
// deadline) for a dial, and starts one more each time a wait, doubled each time, passes with none up: the ones
// pending may all have met dead pods. It gives up when dialFailuresPerWait dials in a row failed with nothing
// else live or pending.
func (p *pool) conn(skip []attempt, deadline time.Time, t *time.Timer) (*conn, error) {
	failures := 0
	for backoff := p.u.lat.dialWait(); ; backoff *= 2 {
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
		wait := backoff
		busy := p.pick(skip) // a live connection with a full pipeline, if any
		if busy != nil {
			queue := time.Duration(busy.inflight.Load()) * p.u.lat.serviceTime()
			wait = min(max(wait, queue), p.u.lat.dialBound())
		}
		if left := time.Until(deadline); left < wait {
			if left <= 0 {
				if busy != nil {
					return busy, nil
				}
				return nil, errNoConn
			}
			wait = left
		}
		t.Reset(wait)
		select {
		case <-ready:
		case <-failed:
			if p.pick(skip) == nil && p.dialingNow() == 0 {
				if failures++; failures == dialFailuresPerWait {
					t.Stop()
					return nil, fmt.Errorf("%w: %d dials to %s %s failed", errNoConn, failures, p.netw, p.u.addr)
				}
			}
		case <-t.C:
			if c := p.pick(skip); c != nil {
				return c, nil
			}
			p.dialMore(wait)
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
	now := time.Now().UnixNano()
	p.used.Store(now)
	if !p.expiryArmed.Load() && p.expiryArmed.CompareAndSwap(false, true) {
		p.expiry.Reset(p.opts.Expire)
	}
	p.earnHedge()
	if p.live() < p.opts.Conns {
		p.fill(p.opts.Conns)
	}
	p.renewIfDue(now)
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
		sent := time.Now()
		id, ahead, serr := c.send(q, sent.UnixNano())
		if serr != nil {
			err = serr
			return true // try the next connection
		}
		q.attempts[q.n] = attempt{c: c, id: id, ahead: ahead, sent: sent}
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
	hedgeIn := p.u.lat.hedgeAfter()
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
			p.u.lat.observe(time.Since(a.sent), int(a.ahead))
			break
		}
	}
	for _, a := range q.attempts[:q.n] {
		if a.c != winner && a.sent.Before(won) {
			a.c.beat()
		}
	}
}

// stop drains every connection: queries in flight are still answered, and for drainLimit a query that still
// arrives (a reload swaps CoreDNS's instances under the queries, and the old one may finish a few) is still
// sent, on a fresh connection if need be. Then every connection is closed, and whatever is unanswered gets the
// error.
func (p *pool) stop() {
	p.expiry.Stop()
	for _, c := range p.list() {
		c.drain()
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
