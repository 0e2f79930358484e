package fastpath

import "net/netip"

// Answer runs the hit path of the listener on addr for q, as its reader does, answering to from.
func (p *Path) Answer(addr netip.AddrPort, q []byte, from netip.AddrPort, out []byte) ([]byte, bool) {
	p.mu.Lock()
	l := p.listeners[addr]
	p.mu.Unlock()
	if l == nil {
		return out, false
	}
	v := l.view.Load()
	start := v.now()
	out, e := v.answer(q, out, start)
	if e == nil {
		return out, false
	}
	l.conns[0].WriteToUDPAddrPort(out, from)
	var a answered // recorded as a reader records a batch of one
	a.add(e)
	a.record(v.now().Sub(start))
	return out, true
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

// EntryBytes is the worst case of one stored answer.
const EntryBytes = EntryWorstCaseBytes

// Series is how many label sets the listener on addr counts its answers into.
func (p *Path) Series(addr netip.AddrPort) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.listeners[addr]
	if l == nil {
		return -1
	}
	ss := l.view.Load().series
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}
