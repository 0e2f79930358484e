package dnscache

import (
	"net"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
)

// TestEntryHoldsNoPointer holds Entry to its layout: no field holds a pointer, so that an entry and its bytes are
// one allocation the GC marks without scanning (allocEntry allocates bytes; a pointer kept in them would not
// keep what it points to alive).
func TestEntryHoldsNoPointer(t *testing.T) {
	typ := reflect.TypeFor[Entry]()
	for i := range typ.NumField() {
		if f := typ.Field(i); holdsPointers(f.Type) {
			t.Errorf("Entry.%s (%s) holds a pointer", f.Name, f.Type)
		}
	}
	if typ.Size() > 80 {
		t.Errorf("Entry is %d bytes, more than the 80 it was made to fit", typ.Size())
	}
}

// answerA is a response to name's A query with one record, ip, of TTL 30.
func answerA(name string, ip net.IP) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: ip}}
	return m
}

// An entry that keeps a last-known-good answer holds a copy of it in its own allocation; the copy is an entry
// of its own (its question, its message, its TTL), and a pointer to it alone keeps the allocation alive.
func TestEntryKeepsItsLastKnownGood(t *testing.T) {
	answer := answerA("svc.example.", net.IPv4(10, 0, 0, 7))
	empty := new(dns.Msg)
	empty.SetQuestion("svc.example.", dns.TypeA)
	empty.Response = true
	stored := time.Now()
	good := newEntry(answer, stored, 30*time.Second, "")
	good.freq.reset(stored, 3)
	var kept *Entry
	func() {
		e := newEntry(empty, stored.Add(time.Second), 5*time.Second, "*.example.").withLastKnownGood(good)
		if e.answering || e.wildcard() != "*.example." || e.TTL(stored.Add(time.Second)) != 5 {
			t.Errorf("the entry changed: answering %v, wildcard %q, TTL %d", e.answering, e.wildcard(), e.TTL(stored.Add(time.Second)))
		}
		kept = e.answeringEntry(answer.Question[0])
		if kept == nil || kept == good {
			t.Fatalf("the entry's answering entry is %p, want a copy of %p", kept, good)
		}
		if uintptr(unsafe.Pointer(kept))%8 != 0 || uintptr(unsafe.Pointer(e))%8 != 0 {
			t.Errorf("entries at %p and %p: not aligned to 8 bytes", e, kept)
		}
	}()
	good = nil
	for range 3 {
		runtime.GC()
		_ = make([]byte, 1<<20) // reuse of freed memory would overwrite the copy
	}
	if kept.name() != "svc.example." || kept.TTL(stored) != 30 || kept.freq.count() != 3 || kept.lastKnown() != nil {
		t.Errorf("the copy reads back as %q, TTL %d, %d hits, last-known-good %p", kept.name(), kept.TTL(stored), kept.freq.count(), kept.lastKnown())
	}
	if r := kept.toMsg(answer, stored, false, false); len(r.Answer) != 1 || r.Answer[0].String() != answer.Answer[0].String() {
		t.Errorf("the copy answers %v, want %v", r.Answer, answer.Answer)
	}
}

// holdsPointers reports whether a value of t holds a pointer the GC follows.
func holdsPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.UnsafePointer, reflect.Slice, reflect.String, reflect.Map, reflect.Chan,
		reflect.Func, reflect.Interface:
		return true
	case reflect.Array:
		return t.Len() > 0 && holdsPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// An entry keeps the question's name, the wildcard and the packed sections in one buffer, and gives each back
// as it was given.
func TestEntryKeepsNamesBesideTheMessage(t *testing.T) {
	m := answerA("Some.Example.", net.IPv4(10, 0, 0, 1))
	for _, wildcard := range []string{"", "*.example."} {
		e := newEntry(m, time.Now(), 30*time.Second, wildcard)
		if e == nil {
			t.Fatal("newEntry returned nil")
		}
		if e.name() != "Some.Example." || e.wildcard() != wildcard {
			t.Errorf("name %q, wildcard %q; want %q, %q", e.name(), e.wildcard(), "Some.Example.", wildcard)
		}
		if !e.matches(dns.Question{Name: "some.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}) {
			t.Errorf("the entry does not match its own question, asked in lower case")
		}
		r := e.toMsg(m, e.storedAt(), false, false)
		if len(r.Answer) != 1 || r.Answer[0].String() != m.Answer[0].String() {
			t.Errorf("answer %v, want %v", r.Answer, m.Answer)
		}
	}
}

// An answer that fits only compressed is kept in a buffer of its compressed size: miekg/dns packs into one of
// the uncompressed size, which an entry would otherwise hold whole (up to 64 KiB against MaxMsgBytes).
func TestEntryHoldsOnlyItsBytes(t *testing.T) {
	m := new(dns.Msg)
	const name = "a-rather-long-headless-service-name.some-namespace.svc.cluster.local."
	m.SetQuestion(name, dns.TypeA)
	m.Response = true
	for i := range 200 {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
			A: net.IPv4(10, 0, byte(i/250), byte(i%250))})
	}
	if n := (&dns.Msg{Answer: m.Answer}).Len(); n <= MaxMsgBytes {
		t.Fatalf("the answer is %d bytes uncompressed: the test needs more than %d", n, MaxMsgBytes)
	}
	e := newEntry(m, time.Now(), 30*time.Second, "")
	if e == nil {
		t.Fatal("an answer that fits compressed was not cached")
	}
	if len(e.wire()) > MaxMsgBytes || int(e.size) > MaxMsgBytes+len(name) {
		t.Errorf("the entry holds %d bytes (%d of them the message) for a bound of %d and its name", e.size, len(e.wire()), MaxMsgBytes)
	}
	if r := e.toMsg(m, e.storedAt(), false, false); len(r.Answer) != len(m.Answer) {
		t.Errorf("%d records back, want %d", len(r.Answer), len(m.Answer))
	}
}

// A response whose rcode is not one (a plugin's bug) is not cached: an entry keeps 12 bits of it.
func TestEntryRefusesWhatIsNotAnRcode(t *testing.T) {
	for _, rcode := range []int{-1, 0x1000, 0x10000} {
		m := new(dns.Msg)
		m.SetQuestion("example.", dns.TypeA)
		m.Rcode = rcode
		if e := newEntry(m, time.Now(), time.Second, ""); e != nil {
			t.Errorf("rcode %#x: cached as %#x", rcode, e.rcode)
		}
	}
	m := new(dns.Msg)
	m.SetQuestion("example.", dns.TypeA)
	m.Rcode = dns.RcodeBadCookie // 23: an extended rcode, kept whole
	if e := newEntry(m, time.Now(), time.Second, ""); e == nil || int(e.rcode) != dns.RcodeBadCookie {
		t.Errorf("an extended rcode was not kept: %v", e)
	}
}
