package fastpath

import "net/netip"

// Exports for the tests of the readers (batching, containment) and the fuzz targets; apart from export_test.go
// so that the two change independently.

// HitFunc is what the readers call for every datagram to answer it from the store.
type HitFunc = hitFunc

// Entry is what a HitFunc answers from.
type Entry = entry

// WrapHit replaces the hit path of the listener on addr with wrap(current), as a test's injected fault.
func (p *Path) WrapHit(addr netip.AddrPort, wrap func(HitFunc) HitFunc) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.listeners[addr]
	if l == nil {
		return false
	}
	h := wrap(*l.hit.Load())
	l.hit.Store(&h)
	return true
}

// Metrics is what p counts into.
func (p *Path) Metrics() *Metrics { return p.metrics }

// Panics is what nodelocaldns_fastpath_panics_total exports.
func (m *Metrics) Panics() float64 { return float64(m.panics.Load()) }

// Build runs the hit path of the listener on addr for q as its reader does, but sends nothing: the answer it
// would send, and whether there is one.
func (p *Path) Build(addr netip.AddrPort, q []byte, out []byte) ([]byte, bool) {
	p.mu.Lock()
	l := p.listeners[addr]
	p.mu.Unlock()
	if l == nil {
		return out, false
	}
	out, e := (*l.hit.Load())(q, netip.AddrPort{}, out, l.view.Load().now())
	return out, e != nil
}

// TTLOffsets finds the TTL fields of a packed answer, as the fast path does to age it.
var TTLOffsets = ttlOffsets

// Received is how many receive calls the readers made and how many datagrams they returned.
func (m *Metrics) Received() (calls, datagrams uint64) { return m.receives.Load(), m.received.Load() }
