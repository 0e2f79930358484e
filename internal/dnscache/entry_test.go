package dnscache

import (
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestEntryPointersFirst holds Entry to its layout: every pointer in the fields before the marker (freq), none
// from it on, so the GC scans an entry only that far.
func TestEntryPointersFirst(t *testing.T) {
	typ := reflect.TypeFor[Entry]()
	marker, ok := typ.FieldByName("freq")
	if !ok {
		t.Fatal("Entry has no field freq")
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Offset >= marker.Offset && holdsPointers(f.Type) {
			t.Errorf("Entry.%s (%s) holds a pointer after the pointer-free part starts (freq, at byte %d)", f.Name, f.Type, marker.Offset)
		}
	}
	if typ.Size() > 112 {
		t.Errorf("Entry is %d bytes, more than the 112 it was made to fit", typ.Size())
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
	m := new(dns.Msg)
	m.SetQuestion("Some.Example.", dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "Some.Example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
		A: net.IPv4(10, 0, 0, 1)}}
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
		r := e.toMsg(m, e.stored, false, false)
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
	if len(e.wire()) > MaxMsgBytes || cap(e.data) > MaxMsgBytes+len(name) {
		t.Errorf("the entry holds %d bytes (%d of them the message) for a bound of %d and its name", cap(e.data), len(e.wire()), MaxMsgBytes)
	}
	if r := e.toMsg(m, e.stored, false, false); len(r.Answer) != len(m.Answer) {
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
