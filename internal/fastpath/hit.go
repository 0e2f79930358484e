package fastpath

import (
	"encoding/binary"
	"time"
)

// maxQuery is the largest query the fast path keys: CoreDNS's UDP server reads 512 bytes (miekg/dns's
// MinMsgSize), so anything longer is CoreDNS's to truncate and reject.
const maxQuery = 512

// build writes the answer to q (whose first two bytes are its ID) into out with ttl on every record: the
// cache gives all of a reply's records the entry's TTL.
func (e *entry) build(out []byte, q []byte, ttl uint32) []byte {
	out = append(out[:0], e.answer...)
	out[0], out[1] = q[0], q[1]
	for _, off := range e.ttls {
		binary.BigEndian.PutUint32(out[off:], ttl)
	}
	return out
}

// answer builds the answer to q from the store into out if it can, and returns the entry it answered from,
// whose prometheus series the caller records (series.record, or a batch's records): the caller sends it (a
// failed send is not retried and the query still counts, as with CoreDNS's UDP server). It does not allocate.
// It returns nil when the query must go to CoreDNS.
func (v *view) answer(q []byte, out []byte, start time.Time) ([]byte, *entry) {
	if len(q) < 12 || len(q) > maxQuery || q[2]&0x80 != 0 { // too short, too long, or a response
		return out, nil
	}
	e := v.store.get(q[2:])
	if e == nil {
		return out, nil
	}
	// Serve counts the hit in the cache's metrics (and towards a prefetch) as the cache would, or refuses: the
	// entry changed, went stale or is due for a prefetch, and CoreDNS's chain answers and refreshes.
	ttl, ok := e.hit.Serve(start)
	if !ok {
		return out, nil
	}
	return e.build(out, q, ttl), e
}
