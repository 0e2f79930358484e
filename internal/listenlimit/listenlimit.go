// Package listenlimit bounds the connections a TCP listener serves, per source address and in all, so that no
// client can take another's turn.
//
// The listeners it wraps (the health port, the agent's metrics) are reachable from every pod on the node.
// golang.org/x/net/netutil.LimitListener, which they used before, stops accepting once its bound is reached:
// the connections beyond it wait in the kernel's accept queue, first come first served, so one pod opening idle
// connections faster than the server times them out keeps everyone else, the kubelet's probe among them,
// waiting behind it. Here Accept never waits on the bound. Every connection is accepted at once and then
// admitted or reset:
//   - a source that already has PerSource connections open is reset, whatever the total. A connection its
//     client has closed (or reset) does not count here, though the server has yet to close its side: on a
//     starved machine that takes as long as the goroutine reading it takes to run, and a scraper that closed
//     and dialled again at once was reset for it (a test scraping the agent's metrics, on CI). It counts in
//     the total until its socket is gone; internal/connlimit, too, counts only established connections. A
//     source at its share is looked over for such connections at most once per rescan (5 ms);
//   - when Total are open, a newcomer from a source with fewer connections than the busiest source's takes the
//     busiest source's oldest connection's place (it is reset), so a source with nothing open is always
//     admitted while any source holds two or more.
//
// A source is the peer's IP address (IPv4-mapped addresses unmapped), so a pod is one source and the node's own
// clients, whose source is a local address, are another.
//
// This package is the one place where the agent opens a listener (open.go): a Pool is made from one of the
// bounds in bounds.go, every listener is opened through a Pool and shares its bounds with the other listeners
// of that Pool, and the memory check counts every bound there (WorstCaseBytes). A listener opened anywhere else
// fails internal/archtest's check; the listeners the embedded CoreDNS opens for DNS are bounded by
// internal/connlimit, and the fast path's TCP listeners on CoreDNS's addresses (OpenSteered) are opened here,
// with connlimit's caps, counted in the memory check as CoreDNS's.
//
// May touch: the listening sockets it opens.
package listenlimit

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are the bounds of one listener. Both must be at least 1; PerSource at least 2 for a newcomer to take
// a busy source's place (with 1, a full listener resets newcomers).
type Limits struct {
	PerSource int // open connections from one source address
	Total     int // open connections in all
}

// Pool is the connections of the listeners opened through it, held within one Limits: a source's connections
// and the total count over all of them, so that a Corefile naming more addresses does not multiply the bound.
type Pool struct {
	limits Limits

	mu      sync.Mutex
	open    map[netip.Addr][]*conn // by source, oldest first
	total   int
	scanned map[netip.Addr]time.Time // when each source at its share was last looked over (heldLocked)
	now     func() time.Time
	scans   int // heldLocked's passes, for tests
}

// rescan is how soon a source at its share is looked over again for connections its client has closed: a
// newcomer in between is reset at once. One source's flood of connections at its share then costs at most
// 1/rescan passes of PerSource getsockopt calls a second (100 each on a DNS listener: 20,000 calls a second),
// not a pass per connection.
const rescan = 5 * time.Millisecond

// NewPool makes an empty pool bounded by l.
func NewPool(l Limits) *Pool {
	return &Pool{limits: l, open: map[netip.Addr][]*conn{}, scanned: map[netip.Addr]time.Time{}, now: time.Now}
}

// wrap makes ln hand out only connections within p's bounds. A connection counts from its Accept to its Close.
func (p *Pool) wrap(ln net.Listener) net.Listener {
	return &listener{Listener: ln, l: p}
}

type listener struct {
	net.Listener
	l *Pool
}

// Accept returns the next admitted connection; the ones it resets in between are never seen by the caller.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ac := l.l.admit(c); ac != nil {
			return ac, nil
		}
	}
}

// admit decides c's fate under the bounds: it returns c wrapped, or resets it and returns nil. A connection
// that makes room for it is reset after the lock is released.
func (l *Pool) admit(c net.Conn) net.Conn {
	src := sourceOf(c)
	l.mu.Lock()
	mine := len(l.open[src])
	if mine >= l.limits.PerSource {
		if now := l.now(); now.Sub(l.scanned[src]) >= rescan {
			l.scanned[src] = now
			mine = l.heldLocked(src)
		}
	}
	if mine >= l.limits.PerSource {
		l.mu.Unlock()
		reset(c)
		return nil
	}
	var victim *conn
	if l.total >= l.limits.Total {
		victim = l.busiestOldest()
		if victim == nil || len(l.open[victim.src]) <= mine+1 {
			// Taking a place would leave the busiest source no busier than this one: no fairer than now.
			l.mu.Unlock()
			reset(c)
			return nil
		}
		l.removeLocked(victim)
	}
	ac := &conn{Conn: c, l: l, src: src}
	l.open[src] = append(l.open[src], ac)
	l.total++
	l.mu.Unlock()
	if victim != nil {
		reset(victim.Conn)
	}
	return ac
}

// heldLocked counts src's connections whose client still holds them: those whose peer has not closed.
func (l *Pool) heldLocked(src netip.Addr) int {
	l.scans++
	n := 0
	for _, c := range l.open[src] {
		if !peerGone(c.Conn) {
			n++
		}
	}
	return n
}

// peerGone reports whether c's client has closed or reset its side: the socket is no longer established (in
// CLOSE_WAIT or CLOSE), and the server's read will end once its goroutine runs. A socket that is not TCP, or
// whose state cannot be read, counts as held.
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	if err := raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		gone = err == nil && info.State != unix.BPF_TCP_ESTABLISHED
	}); err != nil {
		return true // closed under us: it is leaving
	}
	return gone
}

// busiestOldest is the oldest connection of the source with the most open connections.
func (l *Pool) busiestOldest() *conn {
	var best []*conn
	for _, cs := range l.open {
		if len(cs) > len(best) {
			best = cs
		}
	}
	if len(best) == 0 {
		return nil
	}
	return best[0]
}

// removeLocked forgets c; it reports false when c was already forgotten (made room for another, or closed).
func (l *Pool) removeLocked(c *conn) bool {
	cs := l.open[c.src]
	i := slices.Index(cs, c)
	if i < 0 {
		return false
	}
	cs = slices.Delete(cs, i, i+1)
	if len(cs) == 0 {
		delete(l.open, c.src)
		delete(l.scanned, c.src)
	} else {
		l.open[c.src] = cs
	}
	l.total--
	return true
}

// conn is an admitted connection; closing it gives its place back, once its socket is gone.
type conn struct {
	net.Conn
	l   *Pool
	src netip.Addr
}

// Close closes the socket, then gives its place back. In that order: Go closes a descriptor only once the
// goroutine blocked reading it has run (an HTTP server's idle connection always has one), so on a starved
// machine the socket outlived a place given back first, and a newcomer from the same source made it one over
// the bound (:9253 held 4 of one source for over a second against its bound of 2, issue 40).
func (c *conn) Close() error {
	err := c.Conn.Close() // returns once the descriptor is closed (internal/poll.FD.Close)
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return err
}

func sourceOf(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{} // not an IP connection: all such share one source
}

// reset closes c with a TCP reset rather than a FIN: the client learns at once, and the node keeps no
// TIME_WAIT entry per refused connection (a flood of hundreds a second would otherwise leave tens of thousands).
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
