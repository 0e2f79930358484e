package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Options shape an upstream's pools. The zero value of a field takes its default.
type Options struct {
	// Conns is how many flows of each kind are held (4).
	Conns int
	// RenewQueries renews one connection of a pool (its oldest) each time the pool has carried this many
	// queries (6), at most one every RenewGap (20 ms). With kube-proxy placing each new flow on a random pod,
	// the share each pod gets over a few seconds is then an average over many placements instead of a few
	// long-lived ones: at 300 queries a second, about 350 connection lifetimes of 6 queries in 7 s, so a pod's
	// share of a window varies around a third by about 2.5 points (sqrt(1/3 * 2/3 / 350); 2.8 measured over 24
	// windows of test/e2e/upstream's spread test), and the busiest of three reaching 45% is a 4-sigma event.
	// With 12 (175 lifetimes) it varied by 3.8 points and the busiest pod once took 45.04%. Above 600 queries a
	// second the gap bounds the renewals either way (50 a second). The spread is a property of the set of
	// connections, so the pool, not each connection, counts; renewals follow the queries (one connection per
	// RenewQueries of them, fewer flows than the pods that ask kube-dns themselves open, one per query) and stop
	// when they stop.
	RenewQueries uint64
	RenewGap     time.Duration
	// MaxAge renews a pool's oldest connection, while queries come, at least every MaxAge/Conns (jittered over
	// [1/2, 3/2) of it) (20 s), so that new pods get load after a scale-up even on a quiet node.
	MaxAge time.Duration
	// Expire closes the connections of a pool unused this long (forward's expire, 10 s).
	Expire time.Duration
	// Observer, if set, is told of each query and each connection opened (forward's coredns_proxy_conn_cache_*
	// series).
	Observer Observer
}

// Observer counts what the transport does, per protocol ("tcp" or "udp").
type Observer interface {
	// Queried: a query went out on a connection already open.
	Queried(proto string)
	// Dialed: a connection was opened.
	Dialed(proto string)
}

func (o Options) withDefaults() Options {
	if o.Conns <= 0 {
		o.Conns = 4
	}
	if o.RenewQueries == 0 {
		o.RenewQueries = 6
	}
	if o.RenewGap <= 0 {
		o.RenewGap = 20 * time.Millisecond
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 20 * time.Second
	}
	if o.Expire <= 0 {
		o.Expire = 10 * time.Second
	}
	return o
}

// Upstream is one upstream address with its TCP and UDP pools. It runs nothing of its own: every piece of work
// is done by a query, by a connection's reader while the connection is open, or by a timer a query armed (the
// pools' expiry, a draining connection's limit), so an agent with nothing to ask costs nothing.
type Upstream struct {
	addr string
	lat  latency
	tcp  *pool
	udp  *pool
	m    *Stats
	// dial opens a connection within timeout (net.Dialer's; tests put a dead pod's silence in its place).
	dial func(network, addr string, timeout time.Duration) (net.Conn, error)

	stopOnce sync.Once
}

func dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial(network, addr)
}

// New returns the transport to addr (host:port); Stop closes its connections.
func New(addr string, opts Options) *Upstream {
	opts = opts.withDefaults()
	u := &Upstream{addr: addr, m: &Stats{}, dial: dial}
	u.tcp = newPool(u, true, opts)
	u.udp = newPool(u, false, opts)
	return u
}

// Addr is the upstream's address.
func (u *Upstream) Addr() string { return u.addr }

// Stats are the upstream's counters.
func (u *Upstream) Stats() *Stats { return u.m }

// Median is the median of the upstream's recent round trips, 0 before the first answer.
func (u *Upstream) Median() time.Duration { return u.lat.median() }

// Stop drains and then closes every connection.
func (u *Upstream) Stop() {
	u.stopOnce.Do(func() {
		u.tcp.stop()
		u.udp.stop()
	})
}

// ErrInvalidRequest says the request could not be packed.
var ErrInvalidRequest = errors.New("upstream: invalid request")

// Exchange sends req over TCP (tcp) or UDP and returns the first answer, with req's ID, before deadline. req is
// not changed.
func (u *Upstream) Exchange(ctx context.Context, req *dns.Msg, tcp bool, deadline time.Time) (*dns.Msg, error) {
	q := queries.Get().(*query)
	wire, err := req.PackBuffer(q.wire[:cap(q.wire)])
	if err != nil {
		queries.Put(q)
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	q.wire = wire
	q.qend = questionEnd(wire)
	q.n = 0
	q.won.Store(false)
	defer putQuery(q)
	p := u.udp
	if tcp {
		p = u.tcp
	}
	if err := p.exchange(ctx, q, deadline); err != nil {
		return nil, err
	}
	ret := new(dns.Msg)
	if err := ret.Unpack(q.ans); err != nil {
		return nil, fmt.Errorf("upstream %s: unpack answer: %w", u.addr, err)
	}
	ret.Id = req.Id
	return ret, nil
}

// Stats count what the transport did, for tests and for the operator's metrics.
type Stats struct {
	Dials, DialFailures, Deaths, Hedges, Renewals atomic.Uint64
	// Writes counts the writes on connections: fewer than the queries sent when several share one.
	Writes atomic.Uint64
}

func (s *Stats) dialed(string)     { s.Dials.Add(1) }
func (s *Stats) dialFailed(string) { s.DialFailures.Add(1) }
func (s *Stats) died(string)       { s.Deaths.Add(1) }
func (s *Stats) hedged(string)     { s.Hedges.Add(1) }
