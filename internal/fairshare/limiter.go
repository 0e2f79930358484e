package fairshare

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// limiter bounds the queries in flight through one server block's forwards and shares the bound between the
// sources asking, in two levels: between prefixes (a /24 for IPv4, a /64 for IPv6: groups), then between the
// addresses of a prefix (members). With n the groups holding or waiting for a slot, a group's share is
// limit/n, and a member's is its group's share over the group's members (each at least 1):
//
//   - while a slot is free and nobody waits, any query takes it: a lone client may use the whole bound;
//   - when all are taken, a query waits for one, at most maxWait, if its address holds (or waits for) less
//     than its share, and its group less than its own or some address of the group more than its share (the
//     slot then comes out of that neighbour's); otherwise it is refused at once (the shed falls on the heavy).
//     So waiters are bounded per address, per prefix, and in all (limit);
//   - when limit queries already wait, a query that may wait takes the place of the newest waiter of the
//     group that holds and waits for the most, if that group has at least two more than its own: a light
//     source is never kept out by a heavy one's queue;
//   - a slot given back goes to the waiting group that holds the fewest (a group with nothing in flight
//     first), within it to the address that holds the fewest, the oldest waiter first, ties to the group
//     and address whose oldest waiter came first.
//
// Why prefixes: sources are addresses, and addresses are cheap. Many pods, or one pod sending UDP from
// addresses it makes up (CAP_NET_RAW, on a CNI that does not check sources), would each count as a client
// and leave a pod that asks little one share among thousands. Grouped by prefix, a flood from many addresses
// in a few prefixes weighs as a few clients, whatever their number. What a prefix cannot tell apart stays
// shared per address: pods of one node are usually in one /24, and within it each address has its share of
// the prefix's. A spoofer that spreads its sources over as many prefixes as there are slots still brings
// every prefix's share down to one slot (doc.go).
//
// The worst case stays limit queries in flight, as with forward's max_concurrent alone, and at most limit
// goroutines parked here.
type limiter struct {
	limit   int
	maxWait time.Duration

	mu       sync.Mutex
	inflight int
	waiting  int
	seq      uint64                  // orders waiters: the oldest has the lowest
	groups   map[netip.Prefix]*group // those holding or waiting for a slot
	// sources are the groups' members by address: a source that holds a slot is found without working out its
	// prefix again.
	sources map[netip.Addr]*source
	// spareGroups and spareSources are what forget dropped, kept for lookup to use again (spareMax of each): a
	// lone client's query otherwise allocated its group, the group's map and its source anew every time.
	spareGroups  []*group
	spareSources []*source
}

// spareMax bounds the groups and the sources a limiter keeps for use again, and spareMembersMax the members a
// kept group has ever had (a map keeps the storage it grew to).
const (
	spareMax        = 64
	spareMembersMax = 16
)

// group is a prefix's sources.
type group struct {
	key      netip.Prefix
	inflight int
	waiting  int
	members  map[netip.Addr]*source
	peak     int // the most members it has had: a map that grew large is not kept (forget)
}

type source struct {
	key      netip.Addr
	group    *group
	inflight int
	queue    []*waiter // oldest first
}

// waiter is one query waiting for a slot: done is closed once it is decided, ok says whether it got one.
type waiter struct {
	seq  uint64
	done chan struct{}
	ok   bool
}

func newLimiter(limit int, maxWait time.Duration) *limiter {
	return &limiter{limit: limit, maxWait: maxWait, groups: map[netip.Prefix]*group{}, sources: map[netip.Addr]*source{}}
}

// prefixOf is the group of a source address: its /24 (IPv4, IPv4-mapped IPv6 included) or /64 (IPv6). The
// zero Addr (a source that is no address) is a group of its own, the zero Prefix.
func prefixOf(src netip.Addr) netip.Prefix {
	ip := src.Unmap()
	bits := 64
	if ip.Is4() {
		bits = 24
	}
	p, _ := ip.Prefix(bits) // the zero Addr gives the zero Prefix
	return p
}

// acquire takes a slot for a query from src, waiting if the rules say so; false means refused. A true must
// be paired with release(src).
func (l *limiter) acquire(ctx context.Context, src netip.Addr) bool {
	l.mu.Lock()
	g, s := l.lookup(src)
	if l.inflight < l.limit && l.waiting == 0 {
		l.inflight++
		g.inflight++
		s.inflight++
		l.mu.Unlock()
		return true
	}
	gShare := max(1, l.limit/len(l.groups))
	mShare := max(1, gShare/len(g.members))
	if s.inflight+len(s.queue) >= mShare || (g.inflight+g.waiting >= gShare && !g.overShare(mShare)) ||
		(l.waiting >= l.limit && !l.evictFor(g)) {
		l.forget(g, s)
		l.mu.Unlock()
		return false
	}
	l.seq++
	w := &waiter{seq: l.seq, done: make(chan struct{})}
	s.queue = append(s.queue, w)
	g.waiting++
	l.waiting++
	l.mu.Unlock()

	timer := time.NewTimer(l.maxWait)
	defer timer.Stop()
	select {
	case <-w.done:
		return w.ok
	case <-timer.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-w.done:
		return w.ok // decided while the timer fired
	default:
	}
	l.dequeue(g, s, w)
	l.forget(g, s)
	return false
}

// overShare reports whether a member of g holds more than share: a group at its share may still take a
// waiter for a member under its own, since the slot then comes out of that neighbour's (whose next queries
// are refused). l.mu held.
func (g *group) overShare(share int) bool {
	for _, m := range g.members {
		if m.inflight > share {
			return true
		}
	}
	return false
}

// lookup finds or adds src's group and member; l.mu held.
func (l *limiter) lookup(src netip.Addr) (*group, *source) {
	if s := l.sources[src]; s != nil {
		return s.group, s
	}
	key := prefixOf(src)
	g := l.groups[key]
	if g == nil {
		if n := len(l.spareGroups); n > 0 {
			g, l.spareGroups = l.spareGroups[n-1], l.spareGroups[:n-1]
			g.key = key
		} else {
			g = &group{key: key, members: map[netip.Addr]*source{}}
		}
		l.groups[key] = g
	}
	s := g.members[src]
	if s == nil {
		if n := len(l.spareSources); n > 0 {
			s, l.spareSources = l.spareSources[n-1], l.spareSources[:n-1]
			s.key, s.group = src, g
		} else {
			s = &source{key: src, group: g}
		}
		g.members[src] = s
		g.peak = max(g.peak, len(g.members))
		l.sources[src] = s
	}
	return g, s
}

// evictFor refuses the newest waiter of the group holding and waiting for the most, to make room for a
// waiter of g, if that group has at least two more than g; it reports whether it did. l.mu held.
func (l *limiter) evictFor(g *group) bool {
	var heavy *group
	for _, h := range l.groups {
		if h.waiting > 0 && (heavy == nil || h.inflight+h.waiting > heavy.inflight+heavy.waiting) {
			heavy = h
		}
	}
	if heavy == nil || heavy.inflight+heavy.waiting < g.inflight+g.waiting+2 {
		return false
	}
	var from *source
	var newest *waiter
	for _, s := range heavy.members {
		if n := len(s.queue); n > 0 && (newest == nil || s.queue[n-1].seq > newest.seq) {
			from, newest = s, s.queue[n-1]
		}
	}
	l.dequeue(heavy, from, newest)
	newest.ok = false
	close(newest.done)
	l.forget(heavy, from)
	return true
}

// dequeue takes w out of s's queue; l.mu held.
func (l *limiter) dequeue(g *group, s *source, w *waiter) {
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			g.waiting--
			l.waiting--
			return
		}
	}
}

// release gives src's slot back: to the next waiter by the rules above, or to the pool.
func (l *limiter) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[src]
	g := s.group
	s.inflight--
	g.inflight--
	l.forget(g, s)
	if l.waiting == 0 {
		l.inflight--
		return
	}
	var next *group
	var nextHead uint64
	for _, h := range l.groups {
		if h.waiting == 0 {
			continue
		}
		head := oldestOf(h)
		if next == nil || h.inflight < next.inflight || h.inflight == next.inflight && head < nextHead {
			next, nextHead = h, head
		}
	}
	var to *source
	for _, m := range next.members {
		if len(m.queue) == 0 {
			continue
		}
		if to == nil || m.inflight < to.inflight || m.inflight == to.inflight && m.queue[0].seq < to.queue[0].seq {
			to = m
		}
	}
	w := to.queue[0]
	l.dequeue(next, to, w)
	to.inflight++
	next.inflight++
	w.ok = true
	close(w.done)
}

// oldestOf is the sequence number of g's oldest waiter; g has one.
func oldestOf(g *group) uint64 {
	var oldest uint64
	first := true
	for _, m := range g.members {
		if len(m.queue) > 0 && (first || m.queue[0].seq < oldest) {
			oldest, first = m.queue[0].seq, false
		}
	}
	return oldest
}

// forget drops a member that neither holds nor waits for a slot, and a group left without members, keeping
// them for lookup while there is room; l.mu held. Nothing else holds a dropped one: a query holds its source
// only while it holds or waits for a slot, and a group is dropped once it has no members.
func (l *limiter) forget(g *group, s *source) {
	if s.inflight == 0 && len(s.queue) == 0 {
		delete(g.members, s.key)
		delete(l.sources, s.key)
		if len(l.spareSources) < spareMax {
			clear(s.queue[:cap(s.queue)]) // empty, but dequeue leaves a taken waiter past its end
			*s = source{queue: s.queue[:0]}
			l.spareSources = append(l.spareSources, s)
		}
	}
	if len(g.members) == 0 {
		delete(l.groups, g.key)
		if len(l.spareGroups) < spareMax && g.peak <= spareMembersMax {
			*g = group{members: g.members, peak: g.peak} // empty, kept for its storage (which peak sizes)
			l.spareGroups = append(l.spareGroups, g)
		}
	}
}

// inFlight is what the limiter holds: queries in flight, queries waiting, sources (addresses).
func (l *limiter) inFlight() (inflight, waiting, sources int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range l.groups {
		sources += len(g.members)
	}
	return l.inflight, l.waiting, sources
}
