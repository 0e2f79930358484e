package fastpath

import (
	"net/netip"
	"time"
)

// Answer runs the hit path of the listener on addr for q, as its reader does, answering to from.
func (p *Path) Answer(addr netip.AddrPort, q []byte, from netip.AddrPort, out []byte) ([]byte, bool) {
	p.mu.Lock()
	l := p.listeners[addr]
	p.mu.Unlock()
	if l == nil {
		return out, false
	}
	return l.view.Load().answer(l.conns[0], q, from, out, time.Now())
}

// Stored is how many answers the listener on addr holds.
func (p *Path) Stored(addr netip.AddrPort) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.listeners[addr]; l != nil {
		return l.view.Load().store.len()
	}
	return -1
}

// CacheKey is the cache plugin's key for a question.
var CacheKey = cacheKey
