package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Options shape an upstream's pools. The zero value of a field takes its default.
type Options struct {
	// Conns is how many flows of each kind are held (4).
	Conns int
	// RenewQueries renews a connection after it has carried this many queries (8) and is MinAge old (100 ms):
	// with kube-proxy placing each new flow on a random pod, the share each pod gets over a few seconds is then
	// an average over many placements instead of a few long-lived ones. MinAge bounds the renewals to Conns/MinAge
	// a second.
	RenewQueries uint64
	MinAge       time.Duration
	// MaxAge renews a connection whatever its load, jittered over [MaxAge/2, 3*MaxAge/2) (20 s), so that new pods
	// get load after a scale-up even on a quiet node.
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
		o.RenewQueries = 8
	}
	if o.MinAge <= 0 {
		o.MinAge = 100 * time.Millisecond
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 20 * time.Second
	}
	if o.Expire <= 0 {
		o.Expire = 10 * time.Second
	}
	return o
}

// maintainEvery is how often connections due for renewal or expiry are looked at.
const maintainEvery = 250 * time.Millisecond

// Upstream is one upstream address with its TCP and UDP pools.
type Upstream struct {
	addr string
	rtt  rtt
	tcp  *pool
	udp  *pool
	m    *Stats

	stopOnce sync.Once
	stop     chan struct{}
}

// New returns the transport to addr (host:port) and starts its maintenance; Stop ends it.
func New(addr string, opts Options) *Upstream {
	opts = opts.withDefaults()
	u := &Upstream{addr: addr, m: &Stats{}, stop: make(chan struct{})}
	u.tcp = newPool(u, true, opts)
	u.udp = newPool(u, false, opts)
	go u.maintain()
	return u
}

// Addr is the upstream's address.
func (u *Upstream) Addr() string { return u.addr }

// Stats are the upstream's counters.
func (u *Upstream) Stats() *Stats { return u.m }

// SRTT is the upstream's smoothed round-trip time, 0 before the first answer.
func (u *Upstream) SRTT() time.Duration { return u.rtt.get() }

func (u *Upstream) maintain() {
	t := time.NewTicker(maintainEvery)
	defer t.Stop()
	for {
		select {
		case <-u.stop:
			return
		case now := <-t.C:
			u.tcp.maintain(now)
			u.udp.maintain(now)
		}
	}
}

// Stop closes every connection and ends the maintenance.
func (u *Upstream) Stop() {
	u.stopOnce.Do(func() {
		close(u.stop)
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
	Dials, DialFailures, Deaths, Hedges atomic.Uint64
}

func (s *Stats) dialed(string)     { s.Dials.Add(1) }
func (s *Stats) dialFailed(string) { s.DialFailures.Add(1) }
func (s *Stats) died(string)       { s.Deaths.Add(1) }
func (s *Stats) hedged(string)     { s.Hedges.Add(1) }
