package fastpath_test

import (
	"bytes"
	"encoding/hex"
	"net"
	"testing"

	"github.com/miekg/dns"
)

// What the fast path hands CoreDNS, its miss workers unpack as miekg/dns's UDP server does (miss.go): a
// datagram whose header does not parse, or a response, gets no answer; one the accept function rejects gets
// FORMERR or NOTIMP without records; one whose body does not unpack gets FORMERR with what did. Each datagram
// goes to CoreDNS alone and through a fast path, and the answers must be the same bytes.
func TestMalformedLikeCoreDNS(t *testing.T) {
	u := startUpstream(t)
	body := " cache 30\n forward . " + u.Addr
	_, fast := startCoreDNS(t, body)
	alone := startCoreDNSAlone(t, body)

	q := func(edit func(m *dns.Msg)) []byte {
		m := new(dns.Msg)
		m.SetQuestion("malformed.example.", dns.TypeA)
		m.Id = 0x4242
		edit(m)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain := q(func(*dns.Msg) {})
	withOPT := q(func(m *dns.Msg) { m.SetEdns0(1232, false) })
	for _, tc := range []struct {
		name     string
		datagram []byte
		answered bool
	}{
		{"shorter than a header", plain[:7], false},
		{"a response", q(func(m *dns.Msg) { m.Response = true }), false},
		{"opcode UPDATE", q(func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate }), true},
		{"opcode STATUS", q(func(m *dns.Msg) { m.Opcode = dns.OpcodeStatus }), true},
		{"two questions", q(func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) }), true},
		{"an answer record in the query", q(func(m *dns.Msg) {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "x.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.IPv4(192, 0, 2, 9)}}
		}), true},
		{"the question cut short", plain[:len(plain)-3], true},
		{"an additional record cut short", withOPT[:len(withOPT)-4], true},
		{"a header that claims a question it does not hold", plain[:12], true},
		{"a well-formed query", plain, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := exchangeRaw(t, alone, tc.datagram)
			got := exchangeRaw(t, fast, tc.datagram)
			if (want != nil) != tc.answered {
				t.Fatalf("CoreDNS alone answered %x; the case expects answered=%v", want, tc.answered)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("through the fast path:\n%s\nCoreDNS alone:\n%s", hex.Dump(got), hex.Dump(want))
			}
		})
	}
}
