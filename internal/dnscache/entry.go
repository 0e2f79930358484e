package dnscache

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/miekg/dns"
)

// MaxMsgBytes bounds what one entry holds: the packed sections of a response larger than this, even compressed,
// are not cached, and every such query goes to the next plugin. CoreDNS's cache keeps any response, up to a 64 KiB
// TCP message, as parsed records (several times its wire size once names are decompressed). 4 KiB holds every
// answer a UDP client can be sent with the largest common EDNS buffer (4096); only TCP clients get larger ones
// (a headless Service of more than about 250 endpoints, 16 bytes an A record, compressed), and those go to the
// next plugin each time. The bound is what lets the agent's memory limit hold full caches: node-cache's
// standard Corefile, 8 caches of 9984 entries, takes at most about 370 MiB of entries with it (internal/memcheck).
const MaxMsgBytes = 4096

// EntryWorstCaseBytes is the most memory one cached response takes in a Cache: MaxMsgBytes of wire, the
// question name, the struct and its map slot in the cache's shard.
const EntryWorstCaseBytes = MaxMsgBytes + maxNameBytes + entryOverheadBytes

// KeyWorstCaseBytes is the most memory one cache key can hold: its entry and, under serve_stale_policy
// prefer_positive, the last-known-good answer kept beside it. Multiply by a block's success and denial
// capacities for the block's worst case.
func KeyWorstCaseBytes(preferPositive bool) int64 {
	if preferPositive {
		return 2 * EntryWorstCaseBytes
	}
	return EntryWorstCaseBytes
}

// maxNameBytes is the longest domain name (RFC 1035 section 2.3.4), the question's copy an entry keeps.
const maxNameBytes = 255

// entryOverheadBytes over-approximates an Entry's fixed part: the struct (72 bytes, at the head of the allocation
// that holds its bytes), the byte of room miekg/dns packs with, the wildcard name (after the message; usually
// empty), and the shard map's slot and bucket share (about 50 bytes).
const entryOverheadBytes = 512

// Entry is one cached response: its question, header bits and sections, packed. Entries are immutable but for
// their prefetch counters and refresh state; the fast path compares them by pointer to know that the answer it
// learned is still the cache's.
//
// A full cache is tens of thousands of entries, and the GC marks every live object at every cycle: in bench/serve's
// miss workload a cycle's GC CPU was 4.8 ms with full caches, 2.95 with 256 entries each, and what a cycle costs
// is the misses' tail. So an entry holds no pointer at all: the struct and its bytes (the packed message, the
// names, and under prefer_positive the last-known-good entry) are one allocation of bytes, which the GC marks
// without scanning (TestEntryHoldsNoPointer): a cycle's GC CPU under that workload fell from 3.7 to 2.5 ms (three
// alternating runs) against two objects an entry, one of them scanned. Times are nanoseconds on the cache's clock
// since entryEpoch.
type Entry struct {
	stored     int64        // when stored, since entryEpoch: the monotonic reading, so expiry ignores wall-clock steps
	retryAfter atomic.Int64 // a failed refresh holds off another until then (serve_stale's FAILURE_RECHECK), since entryEpoch; 0: none
	freq       freq
	origTTL    uint32
	// The bytes after the struct: data[:wireLen] is the packed message (Answer, Ns and Extra, no OPT, TTLs as
	// stored), data[wireLen:nameEnd] the question's name, data[nameEnd:size] the wildcard's; under
	// prefer_positive an entry that replaced an answer keeps a copy of that answering entry at lastKnownGood
	// bytes from its own start (0: none).
	size          uint32
	lastKnownGood uint32
	qtype, qclass uint16
	rcode         uint16
	wireLen       uint16
	nameEnd       uint16
	aa, ad, ra    bool
	answering     bool // the response answers its question (answersQuestion)
	// refreshing allows one refresh in flight; a successful refresh replaces the entry, and with it this state.
	refreshing atomic.Bool
}

// entrySize is the struct's size, where an entry's bytes start, rounded up so that an entry copied after them
// (last-known-good) is aligned too.
const entrySize = (unsafe.Sizeof(Entry{}) + 7) &^ 7

// allocEntry returns a zero entry with room for n bytes after it: one allocation of bytes, so that the GC neither
// scans it nor follows anything from it. The allocator aligns every object of this size to 8 bytes at least.
func allocEntry(n int) *Entry {
	b := make([]byte, int(entrySize)+n)
	return (*Entry)(unsafe.Pointer(unsafe.SliceData(b)))
}

// data is the bytes after the struct: the message and the names.
func (e *Entry) data() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), e.size)
}

// entryEpoch is what an entry's times are kept from; a time read with the monotonic clock is compared on it.
var entryEpoch = time.Now()

// since is t as an entry keeps it.
func since(t time.Time) int64 { return int64(t.Sub(entryEpoch)) }

// newEntry packs m (its TTLs already capped to d) as stored at now, with the wildcard the answering plugin
// matched (or none), or returns nil when it is larger than MaxMsgBytes or cannot be packed.
func newEntry(m *dns.Msg, now time.Time, d time.Duration, wildcard string) *Entry {
	if m.Rcode < 0 || m.Rcode > 0xFFF {
		return nil // not an rcode (12 bits with EDNS): the reply cannot be packed either
	}
	var name string
	var q dns.Question
	if len(m.Question) != 0 {
		q = m.Question[0]
		name = q.Name
	}
	if len(name)+len(wildcard) > math.MaxUint16-MaxMsgBytes {
		return nil // no name is this long (255 bytes on the wire, four times that escaped)
	}
	// Packed without compression first: the question, which most answers' names point to, is not in the
	// entry, so a single-record answer gains nothing from it, and building the compression map was most of a
	// miss's packing (4% of its CPU in a profile of the bench's miss workload, a map per entry). Only what does
	// not fit is packed again compressed, so the entries cached and their bound are the same. The entry is
	// packed into in place, with room for the names after the message (miekg/dns packs into a buffer of
	// Len()+1 bytes or more, and into a new one when given less).
	body := &dns.Msg{Answer: m.Answer, Ns: m.Ns, Extra: withoutOPT(m.Extra)}
	names := len(name) + len(wildcard)
	room := body.Len() + 1 + names
	e := allocEntry(room)
	e.size = uint32(room) // #nosec G115 -- a message of at most 64 KiB and names bounded above
	wire, err := body.PackBuffer(e.data())
	if err == nil && len(wire) > MaxMsgBytes {
		body.Compress = true
		wire, err = body.Pack()
		if err == nil && len(wire) <= MaxMsgBytes {
			// Pack's buffer is the uncompressed size (up to 64 KiB): the entry takes only what it holds.
			e = allocEntry(len(wire) + names)
			e.size = uint32(len(wire) + names) // #nosec G115 -- at most MaxMsgBytes and two bounded names
			wire = e.data()[:copy(e.data(), wire)]
		}
	}
	if err != nil || len(wire) > MaxMsgBytes {
		return nil
	}
	data := e.data()
	if unsafe.SliceData(wire) != unsafe.SliceData(data) {
		copy(data, wire) // packed elsewhere (cannot happen with the room given): the entry holds it all the same
	}
	copy(data[len(wire):], name)
	copy(data[len(wire)+len(name):], wildcard)
	e.size = uint32(len(wire) + names)                                    // #nosec G115 -- bounded above
	e.wireLen, e.nameEnd = uint16(len(wire)), uint16(len(wire)+len(name)) // #nosec G115 -- bounded above
	e.qtype, e.qclass = q.Qtype, q.Qclass
	e.rcode = uint16(m.Rcode) // #nosec G115 -- checked above
	e.aa, e.ad, e.ra = m.Authoritative, m.AuthenticatedData, m.RecursionAvailable
	e.answering = answersQuestion(m)
	e.origTTL = uint32(d.Seconds())
	e.stored = since(now)
	return e
}

// withLastKnownGood is e with a copy of good after its bytes, as the answer it keeps (prefer_positive): a new
// entry, e is not changed. The copy keeps good's prefetch count and held-off refresh, not a refresh in flight
// (that one ends on good).
func (e *Entry) withLastKnownGood(good *Entry) *Entry {
	at := int(entrySize) + int((e.size+7)&^7) // the copy's offset from the new entry's start, aligned
	n := e.copyTo(allocEntry(at + int(good.size)))
	good.copyTo((*Entry)(unsafe.Add(unsafe.Pointer(n), at)))
	n.lastKnownGood = uint32(at) // #nosec G115 -- two entries of at most 64 KiB each
	return n
}

// copyTo copies e's fields and bytes (not its last-known-good entry) to n, which has room for them, and returns n.
func (e *Entry) copyTo(n *Entry) *Entry {
	n.stored, n.origTTL, n.size = e.stored, e.origTTL, e.size
	n.retryAfter.Store(e.retryAfter.Load())
	n.freq.last, n.freq.hits = e.freq.snapshot()
	n.qtype, n.qclass, n.rcode, n.wireLen, n.nameEnd = e.qtype, e.qclass, e.rcode, e.wireLen, e.nameEnd
	n.aa, n.ad, n.ra, n.answering = e.aa, e.ad, e.ra, e.answering
	copy(n.data(), e.data())
	return n
}

// lastKnown is the answering entry e keeps (prefer_positive), or nil.
func (e *Entry) lastKnown() *Entry {
	if e.lastKnownGood == 0 {
		return nil
	}
	return (*Entry)(unsafe.Add(unsafe.Pointer(e), e.lastKnownGood))
}

// name is the question's name, as the response gave it. (A string over the entry's bytes, which never change:
// a string of its own was an object more per entry for the GC to mark.)
func (e *Entry) name() string { return bytesString(e.data()[e.wireLen:e.nameEnd]) }

// wildcard is the wildcard the answering plugin matched (metadata zone/wildcard), or "".
func (e *Entry) wildcard() string { return bytesString(e.data()[e.nameEnd:]) }

// wire is Answer, Ns and Extra, packed.
func (e *Entry) wire() []byte { return e.data()[:e.wireLen] }

// bytesString is b as a string without a copy; b must never change after.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// withoutOPT is rrs without its OPT records: rrs itself when it has none (the usual answer section), else a copy.
func withoutOPT(rrs []dns.RR) []dns.RR {
	if !slices.ContainsFunc(rrs, func(r dns.RR) bool { return r.Header().Rrtype == dns.TypeOPT }) {
		return rrs
	}
	out := make([]dns.RR, 0, len(rrs))
	for _, r := range rrs {
		if r.Header().Rrtype != dns.TypeOPT {
			out = append(out, r)
		}
	}
	return out
}

// TTL is the entry's remaining TTL at now in whole seconds, negative once expired: what a reply built at now
// carries (CoreDNS truncates the age towards zero).
func (e *Entry) TTL(now time.Time) int {
	return int(e.origTTL) - int(time.Duration(since(now)-e.stored).Seconds())
}

// OrigTTL is the TTL the entry was stored with: what keepttl answers with.
func (e *Entry) OrigTTL() uint32 { return e.origTTL }

// toMsg builds the reply to m from e at now.
func (e *Entry) toMsg(m *dns.Msg, now time.Time, do, ad bool) *dns.Msg {
	return e.toMsgWithTTL(m, uint32(e.TTL(now)), do, ad) // #nosec G115 -- callers pass a non-negative TTL
}

// toMsgWithTTL builds the reply to m from e with ttl on every record. The AA bit is the cached response's
// (CoreDNS #6185); AD is dropped unless the query asked for DNSSEC or set AD itself (RFC 6840 5.7-5.8).
func (e *Entry) toMsgWithTTL(m *dns.Msg, ttl uint32, do, ad bool) *dns.Msg {
	r := new(dns.Msg)
	r.SetReply(m)
	r.Authoritative = e.aa
	r.AuthenticatedData = e.ad && (do || ad)
	r.RecursionAvailable = e.ra
	r.Rcode = int(e.rcode)
	var body dns.Msg
	if err := body.Unpack(e.wire()); err != nil {
		// Our own packing: cannot happen. An empty reply beats a panic in the serving path.
		return r
	}
	r.Answer, r.Ns, r.Extra = setTTL(body.Answer, ttl), setTTL(body.Ns, ttl), setTTL(body.Extra, ttl)
	return r
}

// setTTL sets every record's TTL and returns a non-nil slice, as CoreDNS's filterRRSlice does.
func setTTL(rrs []dns.RR, ttl uint32) []dns.RR {
	if rrs == nil {
		rrs = []dns.RR{}
	}
	for _, r := range rrs {
		r.Header().Ttl = ttl
	}
	return rrs
}

func (e *Entry) matches(q dns.Question) bool {
	// The name as request.Request.QName gives it (escaped), compared with the one stored, as CoreDNS's cache
	// compares them.
	return q.Qtype == e.qtype && q.Qclass == e.qclass && strings.EqualFold(dns.Name(q.Name).String(), e.name())
}

// answeringEntry is e, or the last-known-good answer it keeps, if either answers state's question.
func (e *Entry) answeringEntry(q dns.Question) *Entry {
	return e.answeringEntryBy(func(x *Entry) bool { return x.matches(q) })
}

// answeringEntryBy is answeringEntry with the question compared by matches.
func (e *Entry) answeringEntryBy(matches func(*Entry) bool) *Entry {
	if e.answering && matches(e) {
		return e
	}
	if k := e.lastKnown(); k != nil && k.answering && matches(k) {
		return k
	}
	return nil
}

// storedAt is when the entry was stored, on the cache's clock.
func (e *Entry) storedAt() time.Time { return entryEpoch.Add(time.Duration(e.stored)) }

// beginRefresh claims the entry's one refresh slot, unless a failed refresh holds it off until later.
func (e *Entry) beginRefresh(now time.Time, recheck time.Duration) bool {
	if recheck > 0 {
		if after := e.retryAfter.Load(); after != 0 && since(now) < after {
			return false
		}
	}
	return e.refreshing.CompareAndSwap(false, true)
}

// endRefresh frees the slot; a failed refresh with recheck set holds the next one off for recheck.
func (e *Entry) endRefresh(now time.Time, recheck time.Duration, refreshed bool) {
	if recheck > 0 && !refreshed {
		e.retryAfter.Store(since(now.Add(recheck)))
	} else {
		e.retryAfter.Store(0)
	}
	e.refreshing.Store(false)
}

// freq counts an entry's hits with no gap of the prefetch DURATION or more between them.
type freq struct {
	mu   sync.Mutex
	last int64 // the last hit counted, since entryEpoch
	hits int
}

// update counts a hit at now and returns the count.
func (f *freq) update(d time.Duration, now time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hits = f.next(d, now)
	f.last = since(now)
	return f.hits
}

// next is the count a hit at now would make; f.mu held.
func (f *freq) next(d time.Duration, now time.Time) int {
	if f.last < since(now.Add(-d)) {
		return 1
	}
	return f.hits + 1
}

func (f *freq) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits
}

// snapshot is the last hit counted and the count.
func (f *freq) snapshot() (int64, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.hits
}

func (f *freq) reset(t time.Time, hits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last, f.hits = since(t), hits
}
