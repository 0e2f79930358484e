// Package fastpath answers repeated UDP queries with the bytes CoreDNS's cache answered them with, without
// running CoreDNS's server or plugin chain, and hands everything else to CoreDNS in-process, unchanged.
//
// For every plain UDP listener of the embedded CoreDNS (an address, not a wildcard, whose server blocks it
// understands), the fast path opens its own SO_REUSEPORT sockets on the same address and detaches CoreDNS's
// socket from the group (internal/handover: connected to its own address, the kernel's reuseport selection skips
// it; the same package writes down how this and an instance's leaving fit together). Each socket has one reader that
// answers hits inline, with no goroutine, no unpacking and no allocation (hit.go). Every other datagram goes to a
// miss worker (miss.go), which unpacks it and calls CoreDNS's Server.ServeDNS exactly as CoreDNS's own UDP
// server does: the same accept function, FORMERR handling, context and plugin chain.
//
// What a hit is. When our cache (internal/dnscache, the `cache` directive in our build) answers a query from a
// fresh entry, it reports the entry (dnscache.WithReport) and the fast path keeps the packed answer, keyed by the
// query's bytes apart from the ID (so the name's case, the type and class, the header bits RD/CD/AD, EDNS
// presence, buffer size, DO and options all select their own answer, as they select CoreDNS's scrubbing and
// packing). A later identical query is answered with a copy, its ID and the entry's TTL now, for as long as
// dnscache.Hit.Serve says the cache would do nothing else: the same entry, fresh, not due for a prefetch.
// Other hits (a prefetch due, a stale entry) go through CoreDNS's chain, where the cache answers and refreshes,
// so blocks with prefetch and serve_stale are served too. Blocks with a plugin before cache that answers or
// counts per query (log, dnstap, acl, loadbalance, rewrite, view, metadata, ...) are left to CoreDNS. The metrics
// CoreDNS's prometheus and cache plugins record for a cache hit are recorded for each fast-path answer, with the
// same labels (metrics.go; the histograms in counts of the fast path's own, added into CoreDNS's series when
// they are gathered: histogram.go). CoreDNS is read only through public API (core.go).
//
// TCP on the same addresses is served in CoreDNS's place too, so that the per-source cap on connections is
// enforced where they are accepted (tcp.go: the kernel steers every connection to the fast path's listeners,
// and the chain answers each query).
//
// May touch: its own sockets on CoreDNS's addresses, beside CoreDNS's listeners found through handover, reading the node's CPU list file.
package fastpath

import (
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
)

// Env set to "off" turns the fast path off: CoreDNS serves every query itself.
const Env = "NODELOCALDNS_FASTPATH"

// Enabled reports whether the environment leaves the fast path on.
func Enabled(getenv func(string) string) bool { return !strings.EqualFold(getenv(Env), "off") }

// Path owns the fast path's listeners, one per CoreDNS UDP listener it took over.
type Path struct {
	log     *zap.Logger
	metrics *Metrics
	now     func() time.Time    // the clock entries are judged fresh by (SetClock)
	clients *clients.Accounting // what each reader counts its hits into (SetClients); nil: nothing

	mu        sync.Mutex
	listeners map[netip.AddrPort]*listener

	// tcpPool bounds the connections of the TCP servers (tcp.go), per source at accept (SetTCPLimits); nil:
	// CoreDNS serves TCP itself.
	tcpPool *listenlimit.Pool
	tcp     map[netip.AddrPort]*tcpServer
}

// New returns a Path serving nothing until Sync, counting into m.
func New(log *zap.Logger, m *Metrics) *Path {
	return &Path{log: log, metrics: m, now: time.Now, listeners: map[netip.AddrPort]*listener{},
		tcp: map[netip.AddrPort]*tcpServer{}}
}

// SetClock makes the fast path tell the time by now (time.Now until it is called): whether an entry is still
// fresh, and the TTL its answer carries. The caches it answers from must tell the same time
// (dnscache.Cache.SetClock), or the two disagree on what is fresh. Call it before the first Sync.
func (p *Path) SetClock(now func() time.Time) { p.now = now }

// SetClients makes each reader count the answers it gives into a (internal/clients), through a ring of its
// own. Call it before the first Sync.
func (p *Path) SetClients(a *clients.Accounting) { p.clients = a }

// SetTCPLimits makes the fast path serve TCP on the addresses whose UDP it could serve (tcp.go), admitting a
// connection at accept only within l, across all of them. Call it before the first Sync.
func (p *Path) SetTCPLimits(l listenlimit.Limits) { p.tcpPool = listenlimit.NewPool(l) }

// socketsPerAddr is how many reuseport sockets (and readers) serve one address: one per CPU the runtime uses,
// at most 4, so that on a multi-core node the kernel spreads queries over readers.
func socketsPerAddr() int { return min(runtime.GOMAXPROCS(0), MaxSocketsPerAddr) }

// MaxSocketsPerAddr bounds socketsPerAddr: the readers (and their per-client rings) one address gets.
const MaxSocketsPerAddr = 4

// Sync makes the fast path follow inst, a CoreDNS instance that just started (at start-up and after every
// reload): it takes over the UDP listeners it can serve, hands its entries for the old instance's caches back
// (every view starts empty) and gives up the listeners that are gone or that it can no longer serve.
func (p *Path) Sync(inst *caddy.Instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := map[netip.AddrPort]bool{}
	cls := coreListeners(inst)
	defer p.syncTCP(cls, inst)
	for _, cl := range cls {
		log := p.log.With(zap.String("addr", cl.addr.String()))
		if cl.reason != "" {
			log.Info("fast path steps aside", zap.String("reason", cl.reason))
			continue
		}
		v, reason := newView(cl, p.now, &p.metrics.hists)
		if reason != "" {
			log.Info("fast path steps aside", zap.String("reason", reason))
			continue
		}
		core, err := coreSockets(cl.addr, p.ownCookies())
		if err == nil && len(core) == 0 {
			err = errors.New("coredns's udp socket not found")
		}
		if err != nil {
			log.Warn("fast path steps aside", zap.Error(err))
			continue
		}
		keep[cl.addr] = true
		if l := p.listeners[cl.addr]; l != nil {
			l.update(v, core)
			continue
		}
		l, err := openListener(log, p.metrics, p.clients, cl.addr, core, v, socketsPerAddr())
		if err != nil {
			for _, c := range core {
				c.Close()
			}
			log.Warn("fast path steps aside", zap.Error(err))
			delete(keep, cl.addr)
			continue
		}
		p.listeners[cl.addr] = l
		log.Info("fast path serving", zap.Int("sockets", len(l.conns)), zap.Strings("zones", v.eligibleZones()))
	}
	for addr, l := range p.listeners {
		if !keep[addr] {
			l.close()
			delete(p.listeners, addr)
		}
	}
}

// ownCookies are the SO_COOKIEs of the fast path's own sockets; p.mu held.
func (p *Path) ownCookies() map[uint64]bool {
	own := map[uint64]bool{}
	for _, l := range p.listeners {
		for _, c := range l.conns {
			own[connCookie(c)] = true
		}
		for _, fd := range l.sends {
			own[cookie(fd)] = true
		}
	}
	return own
}

// Close gives every listener back to CoreDNS (unless a handover detached them) and closes the fast path's
// sockets, TCP's too (CoreDNS's TCP listener gets the new connections from then on).
func (p *Path) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, l := range p.listeners {
		l.close()
		delete(p.listeners, addr)
	}
	for addr, t := range p.tcp {
		t.close()
		delete(p.tcp, addr)
	}
}
