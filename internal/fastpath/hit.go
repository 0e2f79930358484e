package fastpath

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"
)

// maxQuery is the largest query the fast path keys: CoreDNS's UDP server reads 512 bytes (miekg/dns's
// MinMsgSize), so anything longer is CoreDNS's to truncate and reject.
const maxQuery = 512

// fresh reports whether e may still be served at now, and the whole seconds to take off its TTLs. CoreDNS
// answers origTTL - floor(now - stored); e's TTLs are that at learned, so e.ttl - ceil(now - learned) is never
// more than CoreDNS would say, and e stops being served no later than the cache plugin's item expires.
func (e *entry) fresh(now time.Time) (uint32, bool) {
	age := now.Sub(e.learned)
	if age < 0 {
		return 0, false
	}
	secs := uint32((age + time.Second - 1) / time.Second)
	return secs, secs < e.ttl
}

// cached reports whether the cache plugin still holds e's item, and nothing in the other cache shadows it.
func (e *entry) cached() bool {
	it, ok := e.in.Get(e.key)
	if !ok || it != e.item {
		return false
	}
	_, shadowed := e.other.Get(e.key)
	return !shadowed
}

// build writes the answer to q (whose first two bytes are its ID) into out with age seconds taken off its TTLs.
func (e *entry) build(out []byte, q []byte, age uint32) []byte {
	out = append(out[:0], e.answer...)
	out[0], out[1] = q[0], q[1]
	for _, off := range e.ttls {
		ttl := binary.BigEndian.Uint32(out[off:])
		binary.BigEndian.PutUint32(out[off:], ttl-age)
	}
	return out
}

// answer answers q from the store if it can, with conn, and records the metrics CoreDNS would have. It does
// not allocate. It returns false when the query must go to CoreDNS.
func (v *view) answer(conn *net.UDPConn, q []byte, from netip.AddrPort, out []byte, start time.Time) ([]byte, bool) {
	if len(q) < 12 || len(q) > maxQuery || q[2]&0x80 != 0 { // too short, too long, or a response
		return out, false
	}
	e := v.store.get(q[2:])
	if e == nil {
		return out, false
	}
	age, ok := e.fresh(start)
	if !ok || !e.cached() {
		return out, false
	}
	out = e.build(out, q, age)
	// A failed write is not retried and the query still counts, as with CoreDNS's UDP server.
	conn.WriteToUDPAddrPort(out, from)
	e.series.record(start, e.size)
	return out, true
}
