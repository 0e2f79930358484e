package fastpath_test

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
)

// The fast path ages an answer by lowering the TTL fields it found in the packed message (TTLOffsets). For any
// bytes, TTLOffsets does not panic and stays inside the message; and whenever it accepts a message that
// miekg/dns (CoreDNS's parser) reads, and that is as miekg/dns packs it (the fast path learns only what CoreDNS
// wrote), lowering the fields it found by age changes exactly the TTL of every record but OPT, by age, and
// nothing else.
func FuzzTTLOffsets(f *testing.F) {
	for _, seed := range ttlSeeds(f) {
		f.Add(seed, uint32(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, age uint32) {
		offs, least, ok := fastpath.TTLOffsets(b)
		if !ok {
			return
		}
		for _, off := range offs {
			if int(off)+4 > len(b) {
				t.Fatalf("TTL offset %d outside a message of %d bytes", off, len(b))
			}
		}
		var orig dns.Msg
		if orig.Unpack(b) != nil || !packedByMiekg(&orig, b) {
			// Not a message CoreDNS writes, and the fast path learns only what CoreDNS wrote: in others a
			// compression pointer may point into a TTL field (the fuzzer found one), so aging it renames a record.
			return
		}
		age %= least + 1 // the fast path serves an entry only while its age is below the least TTL
		patched := append([]byte(nil), b...)
		for _, off := range offs {
			binary.BigEndian.PutUint32(patched[off:], binary.BigEndian.Uint32(patched[off:])-age)
		}
		var got dns.Msg
		if err := got.Unpack(patched); err != nil {
			t.Fatalf("the aged message does not unpack: %v", err)
		}
		want := orig.Copy()
		n := 0
		for _, sec := range [][]dns.RR{want.Answer, want.Ns, want.Extra} {
			for _, rr := range sec {
				if rr.Header().Rrtype != dns.TypeOPT {
					rr.Header().Ttl -= age
					n++
				}
			}
		}
		if n != len(offs) {
			t.Fatalf("%d TTL offsets for %d records that have a TTL", len(offs), n)
		}
		if got.String() != want.String() {
			t.Fatalf("aged by %d:\n%v\nwant:\n%v", age, &got, want)
		}
	})
}

// ttlSeeds are answers as CoreDNS packs them (compressed or not, with EDNS options, negative with a SOA), and
// the hostile shapes: truncated, a compression pointer to itself, a pointer past the end, trailing bytes.
func ttlSeeds(f *testing.F) [][]byte {
	m := new(dns.Msg)
	m.SetQuestion("svc.example.", dns.TypeA)
	m.Response = true
	for i := range 3 {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: "svc.example.", Rrtype: dns.TypeA,
			Class: dns.ClassINET, Ttl: uint32(30 + i)}, A: net.IPv4(192, 0, 2, byte(i))})
	}
	m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: "svc.example.", Rrtype: dns.TypeCNAME,
		Class: dns.ClassINET, Ttl: 5}, Target: "other.svc.example."})
	plain := pack(f, m, false)
	compressed := pack(f, m, true)
	m.SetEdns0(1232, true)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"},
		&dns.EDNS0_PADDING{Padding: make([]byte, 16)})
	edns := pack(f, m, true)
	nx := new(dns.Msg)
	nx.SetQuestion("nx.example.", dns.TypeA)
	nx.Rcode, nx.Response = dns.RcodeNameError, true
	soa, err := dns.NewRR("example. 5 IN SOA ns.example. host.example. 1 7200 1800 86400 5")
	if err != nil {
		f.Fatal(err)
	}
	nx.Ns = []dns.RR{soa}
	negative := pack(f, nx, true)

	loop := append([]byte(nil), compressed...)
	binary.BigEndian.PutUint16(loop[12:], 0xC00C) // the question's name points at itself
	past := append([]byte(nil), compressed...)
	binary.BigEndian.PutUint16(past[len(past)-6-10-2:], 0xC000|0x3FFF)
	return [][]byte{plain, compressed, edns, negative, loop, past,
		compressed[:len(compressed)-3], compressed[:12], append(append([]byte(nil), plain...), 0, 0, 0)}
}

// packedByMiekg reports whether b is m as miekg/dns packs it, compressed or not.
func packedByMiekg(m *dns.Msg, b []byte) bool {
	for _, compress := range []bool{false, true} {
		c := m.Copy()
		c.Compress = compress
		if p, err := c.Pack(); err == nil && string(p) == string(b) {
			return true
		}
	}
	return false
}

func pack(f *testing.F, m *dns.Msg, compress bool) []byte {
	m.Compress = compress
	b, err := m.Pack()
	if err != nil {
		f.Fatal(err)
	}
	return b
}
