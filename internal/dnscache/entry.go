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

// entryOverheadBytes over-approximates an Entry's fixed part: the struct (112 bytes), the byte of room
// miekg/dns packs with, the wildcard name (in the same buffer as the message; usually empty), and the shard
// map's slot and bucket share (about 50 bytes).
const entryOverheadBytes = 512

// Entry is one cached response: its question, header bits and sections, packed. Entries are immutable but for
// their prefetch counters and refresh state; the fast path compares them by pointer to know that the answer it
// learned is still the cache's.
//
// A full cache is tens of thousands of entries, and the GC marks every one at every cycle: in bench/serve's miss
// workload a cycle's GC CPU was 4.8 ms with full caches, 2.95 with 256 entries each. So an entry is two objects,
// itself and its bytes (the names are in data, not strings of their own), and its pointers come first: the GC
// scans an object only up to its last pointer (TestEntryPointersFirst). With this layout a cycle took 4.5 ms
// against 5.7 (four alternating runs): 112 bytes and two objects an entry, against 192 and three.
type Entry struct {
	data          []byte // Answer, Ns and Extra (no OPT) packed as one message, TTLs as stored; then the question's name and the wildcard's
	lastKnownGood *Entry // the answering entry kept when a non-answer replaced it (prefer_positive)
	// refreshing allows one refresh in flight; retryAfter holds off another after a failed one (serve_stale's
	// FAILURE_RECHECK). A successful refresh replaces the entry, and with it this state.
	retryAfter atomic.Pointer[time.Time]
	stored     time.Time // keeps the monotonic reading: expiry ignores wall-clock steps

	// No pointers from here on.
	freq          freq
	origTTL       uint32
	qtype, qclass uint16
	rcode         uint16
	wireLen       uint16 // data[:wireLen] is the packed message, data[wireLen:nameEnd] the name, the rest the wildcard
	nameEnd       uint16
	aa, ad, ra    bool
	answering     bool // the response answers its question (answersQuestion)
	refreshing    atomic.Bool
}

// newEntry packs m (its TTLs already capped to d) as stored at now, with the wildcard the answering plugin
// matched (or none), or returns nil when it is larger than MaxMsgBytes or cannot be packed.
func newEntry(m *dns.Msg, now time.Time, d time.Duration, wildcard string) *Entry {
	if m.Rcode < 0 || m.Rcode > 0xFFF {
		return nil // not an rcode (12 bits with EDNS): the reply cannot be packed either
	}
	e := &Entry{rcode: uint16(m.Rcode), aa: m.Authoritative, ad: m.AuthenticatedData, ra: m.RecursionAvailable} // #nosec G115 -- checked above
	var name string
	if len(m.Question) != 0 {
		q := m.Question[0]
		name, e.qtype, e.qclass = q.Name, q.Qtype, q.Qclass
	}
	if len(name)+len(wildcard) > math.MaxUint16-MaxMsgBytes {
		return nil // no name is this long (255 bytes on the wire, four times that escaped)
	}
	// Packed without compression first: the question, which most answers' names point to, is not in the
	// entry, so a single-record answer gains nothing from it, and building the compression map was most of a
	// miss's packing (4% of its CPU in a profile of the bench's miss workload, a map per entry). Only what does
	// not fit is packed again compressed, so the entries cached and their bound are the same. The buffer packed
	// into has room for the names after the message (miekg/dns packs into one of Len()+1 bytes or more).
	body := &dns.Msg{Answer: m.Answer, Ns: m.Ns, Extra: withoutOPT(m.Extra)}
	wire, err := body.PackBuffer(make([]byte, body.Len()+1+len(name)+len(wildcard)))
	if err == nil && len(wire) > MaxMsgBytes {
		body.Compress = true
		wire, err = body.Pack()
		if err == nil && len(wire) <= MaxMsgBytes {
			// Pack's buffer is the uncompressed size (up to 64 KiB): keep only what the entry holds.
			wire = append(make([]byte, 0, len(wire)+len(name)+len(wildcard)), wire...)
		}
	}
	if err != nil || len(wire) > MaxMsgBytes {
		return nil
	}
	e.data = append(append(wire, name...), wildcard...)
	e.wireLen, e.nameEnd = uint16(len(wire)), uint16(len(wire)+len(name)) // #nosec G115 -- bounded above
	e.answering = answersQuestion(m)
	e.origTTL = uint32(d.Seconds())
	e.stored = now
	return e
}

// name is the question's name, as the response gave it. (A string over the entry's bytes, which never change:
// a string of its own was an object more per entry for the GC to mark.)
func (e *Entry) name() string { return bytesString(e.data[e.wireLen:e.nameEnd]) }

// wildcard is the wildcard the answering plugin matched (metadata zone/wildcard), or "".
func (e *Entry) wildcard() string { return bytesString(e.data[e.nameEnd:]) }

// wire is Answer, Ns and Extra, packed.
func (e *Entry) wire() []byte { return e.data[:e.wireLen] }

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
func (e *Entry) TTL(now time.Time) int { return int(e.origTTL) - int(now.Sub(e.stored).Seconds()) }

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
	if k := e.lastKnownGood; k != nil && k.answering && matches(k) {
		return k
	}
	return nil
}

// beginRefresh claims the entry's one refresh slot, unless a failed refresh holds it off until later.
func (e *Entry) beginRefresh(now time.Time, recheck time.Duration) bool {
	if recheck > 0 {
		if after := e.retryAfter.Load(); after != nil && now.Before(*after) {
			return false
		}
	}
	return e.refreshing.CompareAndSwap(false, true)
}

// endRefresh frees the slot; a failed refresh with recheck set holds the next one off for recheck.
func (e *Entry) endRefresh(now time.Time, recheck time.Duration, refreshed bool) {
	if recheck > 0 && !refreshed {
		after := now.Add(recheck)
		e.retryAfter.Store(&after)
	} else {
		e.retryAfter.Store(nil)
	}
	e.refreshing.Store(false)
}

// freq counts an entry's hits with no gap of the prefetch DURATION or more between them.
type freq struct {
	mu   sync.Mutex
	last time.Duration // the last hit counted, since freqEpoch (a time.Time holds a pointer: Entry keeps its pointers first)
	hits int
}

// freqEpoch is what freq's times are kept from; a time read with the monotonic clock is compared on it.
var freqEpoch = time.Now()

// update counts a hit at now and returns the count.
func (f *freq) update(d time.Duration, now time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hits = f.next(d, now)
	f.last = now.Sub(freqEpoch)
	return f.hits
}

// next is the count a hit at now would make; f.mu held.
func (f *freq) next(d time.Duration, now time.Time) int {
	if f.last < now.Add(-d).Sub(freqEpoch) {
		return 1
	}
	return f.hits + 1
}

func (f *freq) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits
}

func (f *freq) reset(t time.Time, hits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last, f.hits = t.Sub(freqEpoch), hits
}
